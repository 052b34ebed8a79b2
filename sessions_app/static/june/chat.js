// The chat page: one websocket per session (replay of the event log, then live events), a
// composer, cancel/reset, tool timeline and approval cards. No build step, no dependencies.
// Every piece of user or model text goes into the page through textContent, never as HTML.
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("june-config").textContent);
  const $ = (id) => document.getElementById(id);
  const log = $("log");
  const FINAL_CLOSE = { 4400: "bad request", 4401: "please log in again", 4403: "this session is not yours", 4404: "no such agent" };

  let socket = null;
  let lastSeq = 0;           // the last committed event shown: a reconnect resumes after it
  let retryMs = 500;
  let nextFrameId = 1;
  let currentTurn = null;    // the turn the Cancel button cancels
  const turnStatus = new Map();   // turn_id -> status
  const streams = new Map();      // turn_id -> {base, text, el}: the message being streamed
  const finalized = new Map();    // turn_id -> seq of its last message.completed
  const firstIndex = new Map();   // turn_id -> position of its first reply (message.completed)
  const tools = new Map();        // call_id -> timeline row
  const cards = new Map();        // "turn:input" -> approval card
  const pendingFrames = new Map(); // frame id -> card (to show an error on it)
  const compacting = new Map();   // turn_id -> the "summarizing…" note of a compaction under way
  const composerFrames = new Map(); // frame id -> text of a message the server has not accepted yet
  const composerFiles = new Map();  // frame id -> attachment ids it carries (attachments.js)
  const queued = new Map();       // turn_id -> element in #queue (sent, not started yet)
  let ready = false;              // the replay is over: events from now on are live
  const QUEUED_AFTER_MS = 800;    // a message sent to an idle session shows as queued only after this

  // -- small DOM helpers --------------------------------------------------------------------------
  const { el, json } = window.JuneDom;  // dom.js
  let openedAtEnd = false;
  function add(node) {
    stampTime(node);
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
    log.appendChild(node);
    if (atBottom) log.scrollTop = log.scrollHeight;
    return node;
  }
  // Following: a log scrolled to (near) its end stays there whatever grows in it — a new row, a
  // streamed reply, a subagent's box nested in a tool row (children.js) —; a reader who scrolled
  // up stays where they are. `following` is updated by scrolling only, so a big insertion
  // (which moves the end away at once) does not stop it.
  let following = true;
  log.addEventListener("scroll", () => { following = log.scrollHeight - log.scrollTop - log.clientHeight < 80; }, { passive: true });
  new MutationObserver(() => { if (following) log.scrollTop = log.scrollHeight; })
    .observe(log, { childList: true, subtree: true, characterData: true });
  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  // -- the socket -----------------------------------------------------------------------------------
  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}${config.ws_path}?after=${lastSeq}`);
    setConn("connecting");
    socket.onopen = () => { retryMs = 500; };
    socket.onmessage = (msg) => {
      let frame;
      try { frame = JSON.parse(msg.data); } catch (e) { return; }
      onFrame(frame);
    };
    socket.onclose = (ev) => {
      ready = false;
      composerDropped();
      if (FINAL_CLOSE[ev.code]) {
        setConn("closed");
        showError(`Disconnected: ${FINAL_CLOSE[ev.code]}.`);
        return;
      }
      setConn("reconnecting");
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 8000);
    };
  }
  function setConn(state) {
    const badge = $("conn");
    badge.dataset.state = state;
    badge.textContent = state === "live" ? "live" : state + (state === "closed" ? "" : "…");
  }
  function send(frame, card) {
    if (!socket || socket.readyState !== WebSocket.OPEN) { showError("Not connected yet; try again in a moment."); return false; }
    frame.id = nextFrameId++;
    if (card) pendingFrames.set(frame.id, card);
    socket.send(JSON.stringify(frame));
    return true;
  }

  // -- frames in ------------------------------------------------------------------------------------
  function onFrame(f) {
    frameAt = f.at ? new Date(f.at) : new Date();  // replayed frames say when they were committed
    if (typeof f.seq === "number") {
      if (f.seq <= lastSeq) return;  // the server dedupes; this guards a reconnect race
      lastSeq = f.seq;
    }
    const handler = HANDLERS[f.type];
    if (handler) handler(f);
    // children.js, branches.js; `live`: not part of the replay this page opened with (a reconnect's
    // catch-up is news to the page; the opening replay never is, and never reloads it)
    if (!handler || f.type === "session.reset") log.dispatchEvent(new CustomEvent("june:frame", { detail: { ...f, live: ready || openedAtEnd } }));
  }

  const HANDLERS = {
    "ready": (f) => {
      setConn("live"); ready = true; showQueued(f.queued || []); refreshAnswerable(); restoreKept();
      // the replay is in: a session opens at its newest message (issue 40: it opened mid-way,
      // the replayed bubbles having grown after they were appended)
      if (!openedAtEnd) { openedAtEnd = true; if (!focusFound()) log.scrollTop = log.scrollHeight; }
    },
    "ack": (f) => {
      showError("");
      cancelFrames.delete(f.id);
      if (composerFrames.has(f.id)) composerAccepted(f);
      const card = pendingFrames.get(f.id);
      pendingFrames.delete(f.id);
      if (card) card.dataset.state = "sent";
      if (f.for === "start" && !turnStatus.has(f.turn_id)) { setTurn(f.turn_id, f.status); }
    },
    "error": (f) => {
      if (composerRefused(f)) return;
      // a Cancel that reached the server just after its turn ended: nothing was left to cancel,
      // and the turn's own note says how it ended (no error to show)
      if (cancelFrames.delete(f.id) && f.status === 409) return;
      const card = pendingFrames.get(f.id);
      pendingFrames.delete(f.id);
      if (card) {
        card.dataset.state = "open";
        card.querySelector(".card-error").textContent = f.message;
      } else {
        showError(f.message || f.code);
      }
    },
    "turn.started": (f) => {
      unqueue(f.turn_id);
      if (f.trigger === "resume") add(el("div", "note", "Resumed after the answer."));
      else {
        const bubble = userBubble(f.turn_id, f.text, f.trigger === "proactive" ? "trigger" : "user");
        if (f.attachments && window.juneAttachments) window.juneAttachments.render(bubble, f.attachments);
      }
      if (f.trigger !== "resume") titleFrom(f.text);
      setTurn(f.turn_id, "running");
    },
    "message.delta": onDelta,
    // a rename (this tab's form, another tab, the admin): not logged, sent to the open chats
    "session.title": (f) => {
      if (typeof f.title !== "string" || !f.title) return;
      const node = $("session-title");
      node.textContent = f.title;
      node.dataset.titled = "yes";
      document.title = document.title.replace(/ \/ [^·]*·/, ` / ${f.title} ·`);
      const input = document.querySelector(".rename input[name=title]");
      if (input && document.activeElement !== input) { input.value = f.title; input.placeholder = f.title; }
    },
    "message.completed": (f) => {
      finalized.set(f.turn_id, f.seq);
      if (typeof f.index === "number" && !firstIndex.has(f.turn_id)) firstIndex.set(f.turn_id, f.index);
      const s = streams.get(f.turn_id);
      streams.delete(f.turn_id);
      if (!f.text) { if (s) s.el.remove(); return; }
      const bubble = s ? s.el : add(el("div", "msg assistant"));
      if (s) streamDone(s);
      if (typeof f.index === "number") { bubble.dataset.index = f.index; bubble.id = `m${f.index}`; }
      window.JuneMarkdown.fill(bubble, f.text);
    },
    "action.requested": (f) => {
      const call = f.call || {};
      const row = el("div", "tool");
      row.dataset.callId = call.id;
      row.dataset.turnId = f.turn_id;
      row.dataset.state = "requested";
      row.appendChild(el("span", "tool-name", call.name));
      row.appendChild(el("code", "tool-input", json(call.input)));
      row.appendChild(el("span", "tool-state", "requested"));
      row.appendChild(el("div", "tool-result"));
      tools.set(call.id, add(row));
      watchRunning(row);
    },
    "action.completed": (f) => {
      let row = tools.get(f.call_id);
      if (!row) {  // requested in an earlier generation or page: still show the outcome
        row = add(el("div", "tool"));
        row.appendChild(el("span", "tool-name", f.name));
        row.appendChild(el("span", "tool-state"));
        row.appendChild(el("div", "tool-result"));
      }
      row = resultRow(row, f);
      row.dataset.state = f.error ? "error" : "completed";
      row.querySelector(".tool-state").textContent = f.error ? "error" : "completed";
      row.querySelector(".tool-result").textContent = f.error ? f.error : json(f.result);
    },
    "input.requested": (f) => {
      setTurn(f.turn_id, "suspended");
      parkTools(f.turn_id, true);
      const req = f.request || {};
      const card = el("div", "approval card");
      card.dataset.inputId = req.id;
      card.dataset.state = "open";
      card.appendChild(el("div", "approval-title", "Approval needed"));
      card.appendChild(el("p", "approval-prompt", req.prompt));
      const who = req.answerers || {};
      card.dataset.turnId = f.turn_id;
      card.dataset.answerers = who.policy ? "policy" : who.user ? "user" : "owner";
      // the policy's scope is the server's business (it decides, via …/pending's may_answer)
      if (who.policy) card.appendChild(el("p", "hint", "Operators can answer it in the admin inbox."));
      card.appendChild(el("p", "approval-waiting"));
      const build = req.kind === "tool_approval" ? (s, submit) => toolApprovalForm(req, submit) : answerForm;
      card.appendChild(build(req.schema || {}, (answer) => {
        card.querySelector(".card-error").textContent = "";
        if (send({ type: "resume", turn_id: f.turn_id, input_id: req.id, answer: answer }, card)) card.dataset.state = "sending";
      }));
      card.appendChild(el("p", "card-error"));
      card.appendChild(el("p", "approval-outcome"));
      cards.set(`${f.turn_id}:${req.id}`, add(card));
      initAnswerable(card, who);
    },
    "input.answered": (f) => {
      // a send refused because the session was waiting for this answer is no longer true (issue 40)
      if (/waiting for an answer/.test($("composer-error").textContent)) composerMessage("");
      const card = cards.get(`${f.turn_id}:${f.input_id}`);
      if (card) {
        // its buttons go disabled: the cursor goes back to the message box, not <body>
        if (card.contains(document.activeElement)) $("text").focus();
        card.dataset.state = "answered";
        card.querySelector(".approval-outcome").textContent = outcomeText(f);
        const d = f.answer && f.answer.decision;
        card.dataset.outcome = f.answer === true || d === "approve" ? "approved" : f.answer === false ? "denied"
          : d === "edit" ? "edited" : d === "reject" ? "rejected" : "answered";
        card.querySelector(".approval-waiting").textContent = "";
        card.querySelectorAll("button, input, select, textarea").forEach((b) => { b.disabled = true; });
      }
      // a step's parallel calls each ask: the turn goes on only after the last answer
      const more = [...cards.entries()].some(([k, c]) => k.startsWith(`${f.turn_id}:`) && c.dataset.state !== "answered");
      setTurn(f.turn_id, more ? "suspended" : "queued");
      if (!more) parkTools(f.turn_id, false);
      showToRequest();
    },
    "turn.completed": (f) => {
      // the answer was the last model call at one of the turn's limits (model calls, tokens)
      if (f.limited) add(el("div", "note limited", `This turn reached its limit of ${String(f.limited).replace("_", " ")}: the answer above is the agent's best without further tool calls.`)).dataset.limited = f.limited;
      endTurn(f.turn_id, "completed");
    },
    "turn.failed": (f) => {
      add(el("div", "note error", `Turn failed${f.phase ? " in the " + f.phase + " step" : ""}: ${f.error}`));
      endTurn(f.turn_id, "failed");
    },
    "turn.cancelled": (f) => {
      discardPartial(f.turn_id, f.discarded);
      cancelTools(f.turn_id);
      const text = unqueue(f.turn_id);
      const why = CANCEL_REASONS[f.reason] || "";
      add(el("div", "note", text !== null ? `Queued message cancelled${why}: “${text}”` : `Turn cancelled${why}.`));
      endTurn(f.turn_id, "cancelled");
    },
    "compaction.started": (f) => {
      compacting.set(f.turn_id, add(el("div", "note compacting", "Summarizing earlier messages…")));
    },
    // a divider: the model now sees this summary instead of the messages above it (they stay
    // here and in the log); it expands to the summary
    "compaction.completed": (f) => {
      const note = compacting.get(f.turn_id);
      compacting.delete(f.turn_id);
      if (note) note.remove();
      const divider = el("details", "compaction");
      divider.dataset.messages = f.messages;
      divider.dataset.reason = f.reason;
      divider.appendChild(el("summary", null, `${f.messages} earlier message${f.messages === 1 ? "" : "s"} summarized`));
      divider.appendChild(el("div", "compaction-summary", f.summary));
      // where it happened: before the first message the model still reads as it was (the
      // exchange at `boundary`), not after the reply the compaction followed
      const opener = openerAt(f.boundary);
      if (opener) { stampTime(divider); opener.before(divider); } else add(divider);
    },
    "compaction.failed": (f) => {
      const note = compacting.get(f.turn_id);
      compacting.delete(f.turn_id);
      if (note) note.remove();
      add(el("div", "note error", `Could not summarize earlier messages: ${f.error}`));
    },
    "session.reset": (f) => {
      log.replaceChildren();
      streams.clear(); tools.clear(); cards.clear(); finalized.clear(); turnStatus.clear(); compacting.clear(); firstIndex.clear();
      showToRequest();
      clearQueue();
      currentTurn = null;
      setTurn(null, "idle");
      resetNotice(f);
    },
  };

  // A delta belongs to the stream after commit `base`; `offset` places it in that stream's text.
  // A snapshot (offset 0, whole text) repairs a page that joined mid-stream. A page reloaded
  // mid-stream starts from the text it held before the reload (kept in sessionStorage): without
  // it the first live deltas lie past a gap, and the bubble stayed empty until the next snapshot
  // (issue 40). A delta past a gap never draws an empty bubble.
  function onDelta(d) {
    const done = finalized.get(d.turn_id);
    if (done !== undefined && d.base !== null && d.base !== undefined && d.base < done) return;  // stale
    const offset = d.offset || 0;
    let s = streams.get(d.turn_id);
    if (!s || s.base !== d.base) {
      const held = keptText(d.turn_id, d.base);
      if (offset > held.length) return;  // a gap: the next snapshot fills it
      if (s) s.el.remove();
      s = streamBubble(d.turn_id, d.base, held);
    }
    if (offset > s.text.length) return;  // a gap: the next snapshot fills it
    const text = s.text.slice(0, offset) + d.text;
    if (text.length >= s.text.length) {
      s.text = text;
      window.JuneMarkdown.fill(s.el, text);
      if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
    }
    if (turnStatus.get(d.turn_id) !== "running") setTurn(d.turn_id, "running");
  }
  // a streaming bubble, appended with its text already in it; aria-busy: a screen reader reads
  // the reply once it is complete, not at every delta
  function streamBubble(turnId, base, text) {
    const bubble = el("div", "msg assistant streaming");
    bubble.setAttribute("aria-busy", "true");
    if (text) window.JuneMarkdown.fill(bubble, text);
    const s = { base: base, text: text, el: add(bubble) };
    streams.set(turnId, s);
    return s;
  }
  function streamDone(s) {
    s.el.classList.remove("streaming");
    s.el.removeAttribute("aria-busy");
  }

  // -- the text streamed so far survives a reload of the page (sessionStorage, this tab only) --------
  const KEPT_KEY = `june:streams:${config.ws_path}`;
  const kept = (() => {
    try {
      const value = JSON.parse(sessionStorage.getItem(KEPT_KEY) || "[]");
      sessionStorage.removeItem(KEPT_KEY);
      return Array.isArray(value) ? value : [];
    } catch (e) { return []; }
  })();
  function keptText(turnId, base) {
    const k = kept.find((x) => x.turn_id === turnId && x.base === base);
    return k && typeof k.text === "string" ? k.text : "";
  }
  // after the replay: a kept stream whose turn still runs, with no commit since it began, is
  // shown at once (the live deltas then continue it)
  function restoreKept() {
    for (const k of kept.splice(0)) {
      if (streams.has(k.turn_id) || turnStatus.get(k.turn_id) !== "running") continue;
      if (k.base === null || k.base !== lastSeq || typeof k.text !== "string" || !k.text) continue;
      streamBubble(k.turn_id, k.base, k.text);
    }
  }
  window.addEventListener("pagehide", () => {
    const now = [...streams.entries()].filter(([, s]) => s.text).map(([turnId, s]) => ({ turn_id: turnId, base: s.base, text: s.text }));
    try { if (now.length) sessionStorage.setItem(KEPT_KEY, JSON.stringify(now)); } catch (e) { /* full or off: a snapshot repairs it */ }
  });

  function endTurn(turnId, status) {
    const s = streams.get(turnId);
    if (s) { streamDone(s); streams.delete(turnId); }
    setTurn(turnId, status);
  }

  // Each turn has its own status (on its message, or its row in the queue); the header shows
  // the session's: running beats waiting-for-an-answer beats queued beats the last ending.
  function setTurn(turnId, status) {
    let last = status;
    if (turnId) {
      turnStatus.delete(turnId);  // re-insert: the map's order is the order of the latest change
      turnStatus.set(turnId, status);
      turnTag(turnId, status);
      last = null;
    }
    const of = (want) => [...turnStatus.entries()].filter(([, s]) => s === want).map(([id]) => id);
    const running = of("running"), parked = of("suspended"), waiting = of("queued");
    const ended = [...turnStatus.values()].filter((s) => !["running", "suspended", "queued"].includes(s));
    const session = running.length ? "running" : parked.length ? "suspended" : waiting.length ? "queued"
      : last || ended[ended.length - 1] || "idle";
    currentTurn = running[0] || waiting[0] || null;  // the header's Cancel: the running turn
    const badge = $("turn-status");
    badge.dataset.status = session;
    badge.textContent = (session === "suspended" ? "waiting for an answer" : session)
      + (waiting.length && session !== "queued" ? ` · ${waiting.length} queued` : "");
    $("cancel").disabled = !currentTurn;
    $("cancel").title = running.length ? "Cancel the running turn" : "Cancel the first queued message";
  }

  // the first message titles an untitled session, as the server does (selectors.title_from): the
  // header follows at once instead of at the next reload (issue 40)
  function titleFrom(text) {
    const node = $("session-title");
    if (!node || node.dataset.titled === "yes" || !text) return;
    node.dataset.titled = "yes";
    const line = String(text).split(/\s+/).filter(Boolean).join(" ");
    let title = line;
    if (line.length > 60) title = (line.slice(0, 59).replace(/\s+\S*$/, "") || line.slice(0, 59)) + "…";
    node.textContent = title;
    document.title = document.title.replace(/ \/ [^·]*·/, ` / ${title} ·`);
    const key = $("session-key");
    if (key) key.hidden = false;
  }

  // -- approval forms, built from the request's JSON schema ------------------------------------------
  function answerForm(schema, submit) {
    const form = el("form", "answer");
    if (schema.type === "boolean") {
      const yes = el("button", "primary", "Approve"); yes.type = "button";
      const no = el("button", "danger", "Deny"); no.type = "button";
      yes.addEventListener("click", () => submit(true));
      no.addEventListener("click", () => submit(false));
      form.append(yes, no);
      return form;
    }
    const read = schema.type === "object" ? objectFields(form, schema) : field(form, "answer", schema, "Answer");
    const ok = el("button", "primary", "Send answer"); ok.type = "submit";
    form.appendChild(ok);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      try { submit(read()); } catch (e) { form.parentNode.querySelector(".card-error").textContent = e.message; }
    });
    return form;
  }

  // a declared approval of a tool call (docs/approvals.md): the tool and its input, editable;
  // approve runs it as proposed, "Run edited" as written here, reject never runs it
  function toolApprovalForm(req, submit) {
    const form = el("form", "answer tool-approval");
    form.appendChild(el("div", "approval-tool", `Tool: ${req.tool}`));
    const proposed = JSON.stringify(req.input || {}, null, 2);
    const input = el("textarea", "approval-input");
    input.name = "input"; input.rows = Math.min(12, proposed.split("\n").length + 1); input.value = proposed;
    input.setAttribute("aria-label", "The tool's input (edit it to run it differently)");
    const message = el("input", "approval-message");
    message.name = "message"; message.placeholder = "A note for the agent (with Reject)";
    message.setAttribute("aria-label", "A note for the agent");
    const approve = el("button", "primary", "Approve"); approve.type = "button";
    const edited = el("button", null, "Run edited"); edited.type = "button";
    const reject = el("button", "danger", "Reject"); reject.type = "button";
    approve.addEventListener("click", () => submit({ decision: "approve" }));
    edited.addEventListener("click", () => {
      let value;
      try { value = JSON.parse(input.value); } catch (e) {
        form.parentNode.querySelector(".card-error").textContent = "The input is not valid JSON."; return;
      }
      submit({ decision: "edit", input: value });
    });
    reject.addEventListener("click", () => submit({ decision: "reject", message: message.value.slice(0, 2000) }));
    form.append(input, message, approve, edited, reject);
    return form;
  }

  function objectFields(form, schema) {
    const readers = {};
    for (const [name, prop] of Object.entries(schema.properties || {})) readers[name] = field(form, name, prop, prop.title || name);
    return () => {
      const value = {};
      for (const [name, read] of Object.entries(readers)) {
        const v = read();
        if (v !== undefined) value[name] = v;
      }
      return value;
    };
  }

  function field(form, name, schema, labelText) {
    const label = el("label", "field", labelText);
    let input;
    if (Array.isArray(schema.enum)) {
      input = el("select");
      for (const option of schema.enum) { const o = el("option", null, option); o.value = json(option); input.appendChild(o); }
    } else if (schema.type === "boolean") {
      input = el("input"); input.type = "checkbox";
    } else {
      input = el("input");
      input.type = schema.type === "number" || schema.type === "integer" ? "number" : "text";
      if (schema.type === "integer") input.step = "1";
      if (schema.type === "number") input.step = "any";
    }
    input.name = name;
    label.appendChild(input);
    form.appendChild(label);
    return () => {
      if (input.tagName === "SELECT") return JSON.parse(input.value);
      if (input.type === "checkbox") return input.checked;
      if (input.type === "number") {
        if (input.value === "") throw new Error(`${labelText}: a number is required`);
        return Number(input.value);
      }
      return input.value;
    };
  }

  // -- controls -------------------------------------------------------------------------------------
  $("composer").addEventListener("submit", (ev) => {
    ev.preventDefault();
    submitComposer();
  });
  $("text").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); }
  });
  // the button goes disabled when the turn ends: the cursor goes back to the message box, not <body>
  $("cancel").addEventListener("click", () => { cancelCurrent(); $("text").focus(); });
  function cancelCurrent() {
    if (currentTurn) sendCancel(currentTurn);
  }
  const cancelFrames = new Set();  // ids of cancel frames not answered yet
  function sendCancel(turnId) {
    const frame = { type: "cancel", turn_id: turnId };
    if (send(frame)) cancelFrames.add(frame.id);
  }
  // Escape: in the message box, cancels the running turn (as Cancel does); in an approval card,
  // goes back to the message box; in the rename box, closes it (branches.js: closes an edit)
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Escape" || ev.defaultPrevented || !(ev.target instanceof Element)) return;
    const rename = ev.target.closest("details.rename");
    if (rename) { rename.open = false; rename.querySelector("summary").focus(); ev.preventDefault(); return; }
    if (ev.target.closest(".approval")) { $("text").focus(); ev.preventDefault(); return; }
    if (ev.target === $("text") && currentTurn && turnStatus.get(currentTurn) === "running") { cancelCurrent(); ev.preventDefault(); }
  });
  // the open request a person may answer, one Tab from the message box (the log's controls grow
  // with every message)
  $("to-request").addEventListener("click", () => {
    const card = openRequest();
    const control = card && card.querySelector("form.answer:not([hidden]) :is(button, input, textarea, select):not(:disabled)");
    if (!control) return;
    card.scrollIntoView({ block: "nearest" });
    control.focus();
  });
  function openRequest() {
    return [...cards.values()].find((c) => c.dataset.state === "open" && c.dataset.answerable === "yes") || null;
  }
  function showToRequest() {
    $("to-request").hidden = !openRequest();
  }
  $("reset").addEventListener("click", () => {
    if (confirm("Reset this session? Its messages are archived and the conversation starts over.")) send({ type: "reset" });
  });

  // -- the composer: the text stays in the box until the server accepts it (issue 17) ----------------
  // a rate limit or quota: say when sending again works, count down to it, and clear the message
  // then (the text stays in the box). The server's message says what the limit is; the wait is
  // its retry_after, said here once.
  let limitTimer = null;
  function limitCountdown(f) {
    const until = Date.now() + f.retry_after * 1000;
    const say = () => {
      const left = Math.ceil((until - Date.now()) / 1000);
      if (left <= 0) { composerMessage(""); return; }
      const when = left < 120 ? `in ${left} s` : `at ${JuneTime.formatTime(until)}`;
      composerMessage(`Not sent: ${f.message}. Your message is kept in the box: send it again ${when}.`, true);
      $("composer-error").dataset.kind = "limit";
      limitTimer = setTimeout(say, left < 120 ? 1000 : 30000);
    };
    say();
  }
  function composerMessage(text, keepTimer) {
    if (!keepTimer) { clearTimeout(limitTimer); limitTimer = null; }
    delete $("composer-error").dataset.kind;
    const box = $("composer-error");
    box.textContent = text || "";
    box.hidden = !text;
  }
  function submitComposer() {
    const text = $("text").value;
    const files = window.juneAttachments ? window.juneAttachments.ids() : [];
    if (window.juneAttachments && window.juneAttachments.busy()) {
      composerMessage("Not sent yet: a file is still uploading. Send again in a moment.");
      return;
    }
    if (!text.trim() && !files.length) return;
    const max = config.max_text_chars || 32000;
    if (text.length > max) {
      composerMessage(`Not sent: your message has ${text.length.toLocaleString()} characters; the limit is ${max.toLocaleString()}. Shorten it and send again.`);
      return;
    }
    // a message the agent's model could never read whole (issue 40: it was accepted, then failed
    // after two compactions); the server refuses it too
    if (config.window_chars && text.length > config.window_chars) {
      composerMessage(`Not sent: your message has ${text.length.toLocaleString()} characters and cannot fit the model's context window of ${config.window_tokens.toLocaleString()} tokens (at most ${config.window_chars.toLocaleString()} characters). Shorten it or split it over several messages; it is kept in the box.`);
      return;
    }
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      composerMessage("Not sent: not connected (reconnecting…). Your message is kept; send it again in a moment.");
      return;
    }
    const frame = { type: "start", text: text.trim() ? text : "", replace: $("replace").checked, id: nextFrameId++ };
    if (files.length) { frame.attachments = files; composerFiles.set(frame.id, files); }
    composerFrames.set(frame.id, text);
    composerMessage("");
    $("composer").dataset.state = "sending";
    socket.send(JSON.stringify(frame));
  }
  function composerAccepted(f) {
    const text = composerFrames.get(f.id);
    composerFrames.delete(f.id);
    const files = composerFiles.get(f.id) || [];
    if (files.length) { window.juneAttachments.sent(files); composerFiles.delete(f.id); }
    if (!composerFrames.size) delete $("composer").dataset.state;
    if ($("text").value === text) $("text").value = "";  // text typed meanwhile stays
    $("replace").checked = false;
    if (f.status === "queued" && !turnStatus.has(f.turn_id) && text !== undefined) {
      const busy = [...turnStatus.values()].some((s) => s === "running" || s === "suspended" || s === "queued");
      setTurn(f.turn_id, "queued");
      const show = () => {
        if (turnStatus.get(f.turn_id) === "queued") enqueue(f.turn_id, text.trim() ? text : `(${files.length} attachment${files.length === 1 ? "" : "s"})`);
      };
      // behind another turn it waits: shown at once; on an idle session it starts within
      // moments: a row shown now flashed for 24-77 ms on every send, so it shows only if it waits
      if (busy) show(); else setTimeout(show, QUEUED_AFTER_MS);
    }
    $("text").focus();
  }
  function composerRefused(f) {
    // an error frame names the frame it answers; a frame too large to parse is answered with id null
    let id = f.id;
    if ((id === null || id === undefined) && composerFrames.size) id = composerFrames.keys().next().value;
    if (!composerFrames.has(id)) return false;
    composerFrames.delete(id);
    composerFiles.delete(id);  // the chips stay: sending again sends them
    if (!composerFrames.size) delete $("composer").dataset.state;
    if (f.code === "rate_limited" && f.retry_after) {
      limitCountdown(f);
      return true;
    }
    composerMessage(`Not sent: ${f.message || f.code}. Your message is kept in the box.`);
    return true;
  }
  function composerDropped() {
    if (!composerFrames.size) return;
    composerFrames.clear();
    composerFiles.clear();
    delete $("composer").dataset.state;
    composerMessage("The connection dropped before the server confirmed your message. It is kept in the box: if it does not appear above once reconnected, send it again.");
  }

  // -- messages waiting for their turn: shown at once under the log, each with its Cancel ------------
  function enqueue(turnId, text) {
    if (queued.has(turnId)) return;
    const row = el("div", "queued-msg");
    row.dataset.turnId = turnId;
    row.appendChild(el("span", "queued-text", text));
    row.appendChild(el("span", "turn-tag", "queued"));
    const cancel = el("button", "link", "Cancel");
    cancel.type = "button";
    cancel.setAttribute("aria-label", `Cancel the queued message: ${text.slice(0, 60)}`);
    cancel.addEventListener("click", () => { sendCancel(turnId); $("text").focus(); });
    row.appendChild(cancel);
    $("queue").appendChild(row);
    $("queue").hidden = false;
    queued.set(turnId, row);
  }
  function unqueue(turnId) {
    const row = queued.get(turnId);
    if (!row) return null;
    queued.delete(turnId);
    row.remove();
    $("queue").hidden = queued.size === 0;
    return row.querySelector(".queued-text").textContent;
  }
  function clearQueue() {
    for (const id of [...queued.keys()]) unqueue(id);
  }
  function showQueued(list) {
    for (const t of list) {
      if (!turnStatus.has(t.turn_id) || turnStatus.get(t.turn_id) === "queued") {
        setTurn(t.turn_id, "queued");
        enqueue(t.turn_id, t.text);
      }
    }
  }

  // -- a search hit opens the chat at its message (?at=<index>#m<index>; config.focus) -------------
  // an assistant's bubble carries its index (message.completed); a user's is found by its turn
  function focusFound() {
    const f = config.focus;
    if (!f) return false;
    let node = document.getElementById(`m${f.index}`);
    if (!node && f.turn_id && (f.role === "user" || f.role === "trigger")) {
      node = log.querySelector(`.msg[data-turn-id="${CSS.escape(f.turn_id)}"]`);
      if (node) { node.id = `m${f.index}`; node.dataset.index = f.index; }
    }
    if (!node) return false;
    node.classList.add("found");
    following = false;  // the hit stays in view: what the replay still adds does not pull the log down
    node.scrollIntoView({ block: "center" });
    setTimeout(() => node.classList.remove("found"), 4000);
    return true;
  }

  // the bubble of the message a person sent at position `index`: the turn whose first reply comes
  // next opened there
  function openerAt(index) {
    if (typeof index !== "number") return null;
    let best = null, at = Infinity;
    for (const [turnId, first] of firstIndex) if (first > index && first < at) { best = turnId; at = first; }
    return best === null ? null : log.querySelector(`.msg:is(.user, .trigger)[data-turn-id="${CSS.escape(best)}"]`);
  }

  // -- one status per turn, on its message ----------------------------------------------------------
  // the tag is drawn by CSS from data-tag, so the bubble's text stays the message alone
  function userBubble(turnId, text, kind) {
    const bubble = el("div", `msg ${kind}`, text);
    bubble.dataset.turnId = turnId;
    return add(bubble);
  }
  // the words for a status, the same in the header, on a message, in the session list
  // (selectors.STATUS_WORDS) and in the admin
  const TAGS = { running: "running", suspended: "waiting for an answer", failed: "failed", cancelled: "cancelled", queued: "queued" };
  // why a turn was cancelled, when it was not the user's own Cancel
  const CANCEL_REASONS = { requested: "", replaced: " (replaced by a newer message)", reset: " (the session was reset)", parent: " (the turn that started it was cancelled)" };
  function turnTag(turnId, status) {
    const bubble = log.querySelector(`.msg[data-turn-id="${CSS.escape(turnId)}"]`);
    if (!bubble) return;
    if (TAGS[status]) bubble.dataset.tag = TAGS[status]; else delete bubble.dataset.tag;
    bubble.dataset.status = status;
  }

  // -- tool rows in time order: a result that comes after other rows (an approval) is drawn there ----
  function resultRow(row, f) {
    if (row === log.lastElementChild) return row;
    row.querySelector(".tool-state").textContent = "requested (result below)";
    const later = add(el("div", "tool"));
    later.dataset.callId = f.call_id;
    later.appendChild(el("span", "tool-name", f.name || row.querySelector(".tool-name").textContent));
    later.appendChild(el("span", "tool-state"));
    later.appendChild(el("div", "tool-result"));
    tools.set(f.call_id, later);
    return later;
  }

  // -- approval cards: who may answer, and the outcome -----------------------------------------------
  function outcomeText(f) {
    const who = f.name || (f.by ? `user ${f.by}` : "someone");
    const via = f.via === "admin" ? " in the admin inbox" : f.via === "api" ? " over the API" : "";
    if (f.answer === true) return `Approved by ${who}${via}.`;
    if (f.answer === false) return `Denied by ${who}${via}.`;
    if (f.answer === undefined || f.answer === null) return `Answered by ${who}${via}.`;
    const d = f.answer && f.answer.decision;  // a declared approval of a tool call
    if (d === "approve") return `Approved by ${who}${via}.`;
    if (d === "edit") return `Edited and approved by ${who}${via}: ${json(f.answer.input)}`;
    if (d === "reject") return `Rejected by ${who}${via}${f.answer.message ? `: ${f.answer.message}` : "."}`;
    return `Answered by ${who}${via}: ${json(f.answer)}`;
  }
  function setAnswerable(card, may, why) {
    card.dataset.answerable = may ? "yes" : "no";
    const form = card.querySelector("form.answer");
    if (form) form.hidden = !may;
    card.querySelector(".approval-waiting").textContent = may ? "" : why;
    showToRequest();
  }
  function initAnswerable(card, who) {
    if (who.user !== undefined && who.user !== null) {
      const mine = String(who.user) === String(config.user_id);
      setAnswerable(card, mine, "Waiting for the user this request names to answer.");
    } else if (who.policy) {
      setAnswerable(card, false, "Checking who may answer…");
      card.dataset.answerable = "checking";
      showToRequest();
      if (ready) refreshAnswerable();
    } else {
      setAnswerable(card, true, "");
    }
  }
  // the server decides a policy (the agent's authorize_answer): ask it for the open cards
  function refreshAnswerable() {
    const open = [...cards.values()].filter((c) => c.dataset.state !== "answered" && c.dataset.answerers === "policy");
    if (!open.length) return;
    fetch(config.pending_url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`HTTP ${r.status}`))))
      .then((body) => {
        const may = new Map((body.pending || []).map((p) => [`${p.turn_id}:${(p.request || {}).id}`, p.may_answer]));
        for (const [key, card] of cards) {
          if (card.dataset.answerers !== "policy" || card.dataset.state === "answered") continue;
          const policy = card.querySelector(".hint") ? "an operator" : "someone allowed";
          setAnswerable(card, may.get(key) === true, `Waiting for ${policy} to answer. The outcome will appear here.`);
        }
      })
      .catch(() => {
        for (const card of open) setAnswerable(card, true, "");  // let the server refuse, with its reason
      });
  }

  // -- reset: a divider in the log; a banner only when it happens live, dismissible -------------------
  function resetNotice(f) {
    // the divider marks where the conversation starts; the banner (live only) says what happened
    const note = el("div", "note reset-divider");
    note.appendChild(document.createTextNode("New conversation · earlier messages: "));
    if (config.archive_url) {
      const link = el("a", null, f.previous_session);
      link.href = config.archive_url;
      note.appendChild(link);
    } else note.appendChild(document.createTextNode(f.previous_session));
    add(note);
    const notice = $("notice");
    if (!ready) { notice.hidden = true; return; }  // replayed: the divider says it; no banner on reload
    notice.replaceChildren(document.createTextNode(`The session was reset: the conversation starts over, and the earlier one is archived as ${f.previous_session}. `));
    if (config.archive_url) {
      const link = el("a", null, "View the archive");
      link.href = config.archive_url;
      notice.appendChild(link);
    }
    const close = el("button", "link dismiss", "Dismiss");
    close.type = "button";
    close.addEventListener("click", () => { notice.hidden = true; $("text").focus(); });
    notice.appendChild(close);
    notice.hidden = false;
  }

  // -- long work shows progress; cancelled partial text is marked; times on hover -------------------
  let ticking = null;
  let frameAt = new Date();
  function watchRunning(row) {
    row.dataset.since = String(frameAt.getTime());
    if (!ticking) ticking = setInterval(tickRunning, 1000);
  }
  function tickRunning() {
    const rows = log.querySelectorAll(".tool[data-state=requested][data-since]");
    if (!rows.length) { clearInterval(ticking); ticking = null; return; }
    for (const row of rows) {
      const seconds = Math.floor((Date.now() - Number(row.dataset.since)) / 1000);
      const state = row.querySelector(".tool-state");
      if (seconds >= 2 && !state.textContent.includes("result below")) state.textContent = `running, ${seconds} s`;
    }
  }
  // a parked turn's open tool calls wait for the answer, they do not run: no "running, 12 s"
  // counting up over "Waiting for an operator to answer" (live or replayed); once answered they
  // count again from the answer
  function parkTools(turnId, parked) {
    const from = parked ? "requested" : "parked";
    for (const row of log.querySelectorAll(`.tool[data-state=${from}][data-turn-id="${CSS.escape(turnId)}"]`)) {
      row.dataset.state = parked ? "parked" : "requested";
      const state = row.querySelector(".tool-state");
      if (!state.textContent.includes("result below")) state.textContent = parked ? "waiting for an answer" : "requested";
      if (!parked) watchRunning(row);
    }
  }
  // the cancel interrupted the turn's tool in flight, or its calls never ran: their result is
  // {"cancelled": true} and no action.completed comes
  function cancelTools(turnId) {
    for (const row of log.querySelectorAll(`.tool:is([data-state=requested], [data-state=parked])[data-turn-id="${CSS.escape(turnId)}"]`)) {
      row.dataset.state = "cancelled";
      row.querySelector(".tool-state").textContent = "cancelled";
    }
  }
  function discardPartial(turnId, discarded) {
    let s = streams.get(turnId);
    if (!s || !s.text) {
      // replayed (a reload, a late tab): the text the turn streamed before its cancel is the event's
      if (!discarded) return;
      s = { el: add(el("div", "msg assistant")) };
      window.JuneMarkdown.fill(s.el, String(discarded));
    }
    streamDone(s);
    s.el.classList.add("discarded");
    s.el.title = "The turn was cancelled: this partial reply was discarded (it is not part of the conversation).";
  }
  function stampTime(node) {
    if (node.title) return;
    node.title = `at ${JuneTime.formatTime(frameAt)}`;
  }

  connect();
})();
