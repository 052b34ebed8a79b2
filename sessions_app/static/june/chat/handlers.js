// Frames in: one handler per frame type the chat draws. A frame it does not draw (a subagent's,
// a takeover's, a branch switch) and session.reset go on to the other controls as a "june:frame"
// event on the log (children.js, takeover.js, branches.js).
import * as approvals from "./approvals.js";
import { render as renderAttachments } from "./attachments.js";
import * as composer from "./composer.js";
import { config } from "./config.js";
import { setConn } from "./connection.js";
import { $, el } from "./dom.js";
import { nextSeq, openerTurn } from "./frames.js";
import { add, bubbleOf, focusFound, log, showError, stampTime } from "./log.js";
import { fill } from "./markdown.js";
import { forgetConversation, state } from "./state.js";
import { discardPartial, endTurn, onDelta, restoreKept, streamDone } from "./stream.js";
import * as tools from "./tools.js";
import { clearQueue, queuedNow, setTurn, showQueued, titleFrom, unqueue } from "./turns.js";
import { cancelledText, plural } from "./words.js";

export function onFrame(f) {
  state.frameAt = f.at ? new Date(f.at) : new Date(); // replayed frames say when they were committed
  const seq = nextSeq(state.lastSeq, f);
  if (seq === null) return;
  state.lastSeq = seq;
  const handler = HANDLERS[f.type];
  if (handler) handler(f);
  // `live`: not part of the replay this page opened with (a reconnect's catch-up is news to the
  // page; the opening replay never is, and never reloads it)
  if (!handler || f.type === "session.reset") {
    log.dispatchEvent(new CustomEvent("june:frame", { detail: { ...f, live: state.ready || state.openedAtEnd } }));
  }
}

// the user's message (or a trigger's), tagged with its turn's status by turns.js
function userBubble(turnId, text, kind) {
  const bubble = el("div", `msg ${kind}`, text);
  bubble.dataset.turnId = turnId;
  return add(bubble);
}

function dropNote(map, turnId) {
  const note = map.get(turnId);
  map.delete(turnId);
  if (note) note.remove();
}

// reset: a divider in the log; a banner only when it happens live, dismissible
function archiveLink(text) {
  if (!config.archive_url) return document.createTextNode(text);
  const link = el("a", null, text);
  link.href = config.archive_url;
  return link;
}

function resetNotice(f) {
  const note = el("div", "note reset-divider");
  note.append(document.createTextNode("New conversation · earlier messages: "), archiveLink(f.previous_session));
  add(note);
  const notice = $("notice");
  if (!state.ready) { // replayed: the divider says it; no banner on reload
    notice.hidden = true;
    return;
  }
  notice.replaceChildren(document.createTextNode(`The session was reset: the conversation starts over, and the earlier one is archived as ${f.previous_session}. `));
  if (config.archive_url) notice.appendChild(archiveLink("View the archive"));
  const close = el("button", "link dismiss", "Dismiss");
  close.type = "button";
  close.addEventListener("click", () => {
    notice.hidden = true;
    $("text").focus();
  });
  notice.appendChild(close);
  notice.hidden = false;
}

const HANDLERS = {
  ready: (f) => {
    setConn("live");
    composer.reconnected();
    state.ready = true;
    showQueued(f.queued || []);
    approvals.refreshAnswerable();
    restoreKept();
    // the replay is in: a session opens at its newest message (the replayed bubbles grow after
    // they are appended)
    if (!state.openedAtEnd) {
      state.openedAtEnd = true;
      if (!focusFound()) log.scrollTop = log.scrollHeight;
    }
  },
  // another tab of this session queued a message (a frame missed here comes with the next `ready`)
  queued: (f) => {
    for (const t of f.queued || []) {
      const text = t.text?.trim() ? t.text : `(${plural(t.attachments || 0, "attachment")})`;
      if (!state.turnStatus.has(t.turn_id)) queuedNow(t.turn_id, text);
    }
  },
  ack: (f) => {
    showError("");
    state.cancelFrames.delete(f.id);
    if (state.composerFrames.has(f.id)) composer.accepted(f);
    const card = state.pendingFrames.get(f.id);
    state.pendingFrames.delete(f.id);
    if (card) card.dataset.state = "sent";
    // a start while a person answers starts no turn (turn_id null): the banner says so
    if (f.for === "start" && f.turn_id && !state.turnStatus.has(f.turn_id)) setTurn(f.turn_id, f.status);
  },
  error: (f) => {
    if (composer.refused(f)) return;
    // a Cancel that reached the server just after its turn ended: nothing was left to cancel,
    // and the turn's own note says how it ended (no error to show)
    if (state.cancelFrames.delete(f.id) && f.status === 409) return;
    const card = state.pendingFrames.get(f.id);
    state.pendingFrames.delete(f.id);
    // answered meanwhile (another tab, the inbox): its outcome says who; no error, and no reopening
    if (card?.dataset.state === "answered") return;
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
      if (f.attachments) renderAttachments(bubble, f.attachments);
      titleFrom(f.text);
    }
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
    if (input && document.activeElement !== input) {
      input.value = f.title;
      input.placeholder = f.title;
    }
  },
  "message.completed": (f) => {
    state.finalized.set(f.turn_id, f.seq);
    if (typeof f.index === "number" && !state.firstIndex.has(f.turn_id)) state.firstIndex.set(f.turn_id, f.index);
    const s = state.streams.get(f.turn_id);
    state.streams.delete(f.turn_id);
    if (!f.text) {
      if (s) s.el.remove();
      return;
    }
    const bubble = s ? s.el : add(el("div", "msg assistant"));
    if (s) streamDone(s);
    if (typeof f.index === "number") {
      bubble.dataset.index = f.index;
      bubble.id = `m${f.index}`;
    }
    fill(bubble, f.text, true); // a finished reply: drawn whole, as the server renders it
  },
  "action.requested": tools.requested,
  "action.completed": tools.completed,
  "input.requested": (f) => {
    setTurn(f.turn_id, "suspended");
    tools.parkTools(f.turn_id, true);
    approvals.requestCard(f);
  },
  "input.answered": (f) => {
    // a send refused because the session was waiting for this answer is no longer true
    if (/waiting for an answer/.test($("composer-error").textContent)) composer.composerMessage("");
    const more = approvals.answered(f);
    setTurn(f.turn_id, more ? "suspended" : "queued");
    if (!more) tools.parkTools(f.turn_id, false);
    approvals.showToRequest();
  },
  "turn.completed": (f) => {
    // the answer was the last model call at one of the turn's limits (model calls, tokens)
    if (f.limited) {
      const words = String(f.limited).replace("_", " ");
      add(el("div", "note limited", `This turn reached its limit of ${words}: the answer above is the agent's best without further tool calls.`)).dataset.limited = f.limited;
    }
    endTurn(f.turn_id, "completed");
  },
  "turn.failed": (f) => {
    add(el("div", "note error", `Turn failed${f.phase ? ` in the ${f.phase} step` : ""}: ${f.error}`));
    endTurn(f.turn_id, "failed");
  },
  "turn.cancelled": (f) => {
    discardPartial(f.turn_id, f.discarded);
    tools.cancelTools(f.turn_id);
    add(el("div", "note", cancelledText(unqueue(f.turn_id), f.reason)));
    endTurn(f.turn_id, "cancelled");
  },
  "compaction.started": (f) => {
    state.compacting.set(f.turn_id, add(el("div", "note compacting", "Summarizing earlier messages…")));
  },
  // a divider: the model now sees this summary instead of the messages above it (they stay
  // here and in the log); it expands to the summary
  "compaction.completed": (f) => {
    dropNote(state.compacting, f.turn_id);
    const divider = el("details", "compaction");
    divider.dataset.messages = f.messages;
    divider.dataset.reason = f.reason;
    divider.appendChild(el("summary", null, `${plural(f.messages, "earlier message")} summarized`));
    divider.appendChild(el("div", "compaction-summary", f.summary));
    // where it happened: before the first message the model still reads as it was (the
    // exchange at `boundary`), not after the reply the compaction followed
    const turnId = openerTurn(state.firstIndex, f.boundary);
    const opener = turnId === null ? null : bubbleOf(turnId, ".msg:is(.user, .trigger)");
    if (opener) {
      stampTime(divider);
      opener.before(divider);
    } else add(divider);
  },
  "compaction.failed": (f) => {
    dropNote(state.compacting, f.turn_id);
    add(el("div", "note error", `Could not summarize earlier messages: ${f.error}`));
  },
  "session.reset": (f) => {
    state.resetSeq = typeof f.seq === "number" ? f.seq : state.lastSeq;
    log.replaceChildren();
    forgetConversation(state);
    approvals.showToRequest();
    clearQueue();
    setTurn(null, "idle");
    resetNotice(f);
  },
};
