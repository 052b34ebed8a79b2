// One status per turn, on its message (the tag is drawn by CSS from data-tag, so the bubble's
// text stays the message alone) or on its row in the queue; the header shows the session's.
// Messages waiting for their turn show at once under the log, each with its Cancel.
import { send } from "./connection.js";
import { $, el } from "./dom.js";
import { bubbleOf } from "./log.js";
import { busy, sessionStatus, state } from "./state.js";
import { TAGS, titleOf } from "./words.js";

function turnTag(turnId, status) {
  const bubble = bubbleOf(turnId);
  if (!bubble) return;
  if (TAGS[status]) bubble.dataset.tag = TAGS[status];
  else delete bubble.dataset.tag;
  bubble.dataset.status = status;
}

export function setTurn(turnId, status) {
  let last = status;
  if (turnId) {
    state.turnStatus.delete(turnId); // re-insert: the map's order is the order of the latest change
    state.turnStatus.set(turnId, status);
    turnTag(turnId, status);
    last = null;
  }
  const now = sessionStatus(state.turnStatus, last);
  state.currentTurn = now.current;
  const badge = $("turn-status");
  badge.dataset.status = now.session;
  badge.textContent = (now.session === "suspended" ? "waiting for an answer" : now.session)
    + (now.waiting && now.session !== "queued" ? ` · ${now.waiting} queued` : "");
  $("cancel").disabled = !now.current;
  $("cancel").title = now.running ? "Cancel the running turn" : "Cancel the first queued message";
}

// the header follows the first message at once instead of at the next reload
export function titleFrom(text) {
  const node = $("session-title");
  if (!node || node.dataset.titled === "yes" || !text) return;
  node.dataset.titled = "yes";
  const title = titleOf(text);
  node.textContent = title;
  document.title = document.title.replace(/ \/ [^·]*·/, ` / ${title} ·`);
  const key = $("session-key");
  if (key) key.hidden = false;
}

export function sendCancel(turnId) {
  const frame = { type: "cancel", turn_id: turnId };
  if (send(frame)) state.cancelFrames.add(frame.id);
}

export function enqueue(turnId, text) {
  if (state.queued.has(turnId)) return;
  const row = el("div", "queued-msg");
  row.dataset.turnId = turnId;
  row.appendChild(el("span", "queued-text", text));
  row.appendChild(el("span", "turn-tag", "queued"));
  const cancel = el("button", "link", "Cancel");
  cancel.type = "button";
  cancel.setAttribute("aria-label", `Cancel the queued message: ${text.slice(0, 60)}`);
  cancel.addEventListener("click", () => {
    sendCancel(turnId);
    $("text").focus();
  });
  row.appendChild(cancel);
  $("queue").appendChild(row);
  $("queue").hidden = false;
  state.queued.set(turnId, row);
}

// the queued message's text, or null when it was not queued
export function unqueue(turnId) {
  const row = state.queued.get(turnId);
  if (!row) return null;
  state.queued.delete(turnId);
  row.remove();
  $("queue").hidden = state.queued.size === 0;
  return row.querySelector(".queued-text").textContent;
}

export function clearQueue() {
  for (const id of [...state.queued.keys()]) unqueue(id);
}

const QUEUED_AFTER_MS = 800; // a message sent to an idle session shows as queued only after this

// a turn queued just now (this tab's send, or another tab's: the `queued` frame). Behind another
// turn it waits: shown at once; on an idle session it starts within moments: a row shown now
// flashed for 24-77 ms on every send, so it shows only if it still waits a moment later
export function queuedNow(turnId, text) {
  const behind = busy(state.turnStatus);
  setTurn(turnId, "queued");
  const show = () => {
    if (state.turnStatus.get(turnId) === "queued") enqueue(turnId, text);
  };
  if (behind) show();
  else setTimeout(show, QUEUED_AFTER_MS);
}

// the ready frame's queue (a reload shows it too)
export function showQueued(list) {
  for (const t of list) {
    if (!state.turnStatus.has(t.turn_id) || state.turnStatus.get(t.turn_id) === "queued") {
      setTurn(t.turn_id, "queued");
      enqueue(t.turn_id, t.text);
    }
  }
}
