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
  const tools = new Map();        // call_id -> timeline row
  const cards = new Map();        // "turn:input" -> approval card
  const pendingFrames = new Map(); // frame id -> card (to show an error on it)

  // -- small DOM helpers --------------------------------------------------------------------------
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(node) {
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
    log.appendChild(node);
    if (atBottom) log.scrollTop = log.scrollHeight;
    return node;
  }
  function json(value) {
    try { return JSON.stringify(value); } catch (e) { return String(value); }
  }
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
    if (typeof f.seq === "number") {
      if (f.seq <= lastSeq) return;  // the server dedupes; this guards a reconnect race
      lastSeq = f.seq;
    }
    const handler = HANDLERS[f.type];
    if (handler) handler(f);
    if (!handler || f.type === "session.reset") log.dispatchEvent(new CustomEvent("june:frame", { detail: f }));  // children.js
  }

  const HANDLERS = {
    "ready": () => setConn("live"),
    "ack": (f) => {
      showError("");
      const card = pendingFrames.get(f.id);
      pendingFrames.delete(f.id);
      if (card) card.dataset.state = "sent";
      if (f.for === "start") { setTurn(f.turn_id, f.status); }
    },
    "error": (f) => {
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
      if (f.trigger === "resume") add(el("div", "note", "Resumed after the answer."));
      else add(el("div", `msg ${f.trigger === "proactive" ? "trigger" : "user"}`, f.text));
      setTurn(f.turn_id, "running");
    },
    "message.delta": onDelta,
    "message.completed": (f) => {
      finalized.set(f.turn_id, f.seq);
      const s = streams.get(f.turn_id);
      streams.delete(f.turn_id);
      if (!f.text) { if (s) s.el.remove(); return; }
      const bubble = s ? s.el : add(el("div", "msg assistant"));
      bubble.classList.remove("streaming");
      bubble.textContent = f.text;
    },
    "action.requested": (f) => {
      const call = f.call || {};
      const row = el("div", "tool");
      row.dataset.callId = call.id;
      row.dataset.state = "requested";
      row.appendChild(el("span", "tool-name", call.name));
      row.appendChild(el("code", "tool-input", json(call.input)));
      row.appendChild(el("span", "tool-state", "requested"));
      row.appendChild(el("div", "tool-result"));
      tools.set(call.id, add(row));
    },
    "action.completed": (f) => {
      let row = tools.get(f.call_id);
      if (!row) {  // requested in an earlier generation or page: still show the outcome
        row = add(el("div", "tool"));
        row.appendChild(el("span", "tool-name", f.name));
        row.appendChild(el("span", "tool-state"));
        row.appendChild(el("div", "tool-result"));
      }
      row.dataset.state = f.error ? "error" : "completed";
      row.querySelector(".tool-state").textContent = f.error ? "error" : "completed";
      row.querySelector(".tool-result").textContent = f.error ? f.error : json(f.result);
    },
    "input.requested": (f) => {
      setTurn(f.turn_id, "suspended");
      const req = f.request || {};
      const card = el("div", "approval card");
      card.dataset.inputId = req.id;
      card.dataset.state = "open";
      card.appendChild(el("div", "approval-title", "Approval needed"));
      card.appendChild(el("p", "approval-prompt", req.prompt));
      const who = req.answerers || {};
      if (who.policy) card.appendChild(el("p", "hint", `Answerable under the ${who.policy} policy (${json(who.scope)}); operators can answer in the admin inbox.`));
      card.appendChild(answerForm(req.schema || {}, (answer) => {
        card.querySelector(".card-error").textContent = "";
        if (send({ type: "resume", turn_id: f.turn_id, input_id: req.id, answer: answer }, card)) card.dataset.state = "sending";
      }));
      card.appendChild(el("p", "card-error"));
      card.appendChild(el("p", "approval-outcome"));
      cards.set(`${f.turn_id}:${req.id}`, add(card));
    },
    "input.answered": (f) => {
      const card = cards.get(`${f.turn_id}:${f.input_id}`);
      if (card) {
        card.dataset.state = "answered";
        card.querySelector(".approval-outcome").textContent = `Answered${f.name || f.by ? " by " + (f.name || f.by) : ""}.`;
        card.querySelectorAll("button, input, select").forEach((b) => { b.disabled = true; });
      }
      setTurn(f.turn_id, "queued");
    },
    "turn.completed": (f) => endTurn(f.turn_id, "completed"),
    "turn.failed": (f) => {
      add(el("div", "note error", `Turn failed${f.phase ? " in the " + f.phase + " step" : ""}: ${f.error}`));
      endTurn(f.turn_id, "failed");
    },
    "turn.cancelled": (f) => {
      add(el("div", "note", `Turn cancelled (${f.reason}).`));
      endTurn(f.turn_id, "cancelled");
    },
    "session.reset": (f) => {
      log.replaceChildren();
      streams.clear(); tools.clear(); cards.clear(); finalized.clear(); turnStatus.clear();
      currentTurn = null;
      setTurn(null, "idle");
      const notice = $("notice");
      notice.textContent = `The session was reset: earlier messages are archived as ${f.previous_session} (now generation ${f.generation}).`;
      notice.hidden = false;
    },
  };

  // A delta belongs to the stream after commit `base`; `offset` places it in that stream's text.
  // A snapshot (offset 0, whole text) repairs a page that joined mid-stream.
  function onDelta(d) {
    const done = finalized.get(d.turn_id);
    if (done !== undefined && d.base !== null && d.base !== undefined && d.base < done) return;  // stale
    let s = streams.get(d.turn_id);
    if (!s || s.base !== d.base) {
      if (s) s.el.remove();
      s = { base: d.base, text: "", el: add(el("div", "msg assistant streaming")) };
      streams.set(d.turn_id, s);
    }
    const offset = d.offset || 0;
    if (offset > s.text.length) return;  // a gap: the next snapshot fills it
    const text = s.text.slice(0, offset) + d.text;
    if (text.length >= s.text.length) {
      s.text = text;
      s.el.textContent = text;
      if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
    }
    if (turnStatus.get(d.turn_id) !== "running") setTurn(d.turn_id, "running");
  }

  function endTurn(turnId, status) {
    const s = streams.get(turnId);
    if (s) { s.el.classList.remove("streaming"); streams.delete(turnId); }
    setTurn(turnId, status);
  }

  function setTurn(turnId, status) {
    if (turnId) {
      turnStatus.set(turnId, status);
      if (["queued", "running", "suspended"].includes(status)) currentTurn = turnId;
      else if (turnId !== currentTurn) return;  // an older turn ended: the badge follows the newest
    }
    const badge = $("turn-status");
    badge.dataset.status = status;
    badge.textContent = status === "suspended" ? "waiting for an answer" : status;
    $("cancel").disabled = !(currentTurn && ["queued", "running"].includes(status));
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
    const text = $("text").value;
    if (!text.trim()) return;
    if (send({ type: "start", text: text, replace: $("replace").checked })) $("text").value = "";
  });
  $("text").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); }
  });
  $("cancel").addEventListener("click", () => { if (currentTurn) send({ type: "cancel", turn_id: currentTurn }); });
  $("reset").addEventListener("click", () => {
    if (confirm("Reset this session? Its messages are archived and the conversation starts over.")) send({ type: "reset" });
  });

  connect();
})();
