// The log: what every frame draws goes in here, stamped with its time. Following: a log scrolled
// to (near) its end stays there whatever grows in it — a new row, a streamed reply, a subagent's
// box nested in a tool row (children.js) —; a reader who scrolled up stays where they are.
// `following` is updated by scrolling only, so a big insertion (which moves the end away at
// once) does not stop it.
import { config } from "./config.js";
import { $, nearEnd } from "./dom.js";
import { state } from "./state.js";
import { formatTime } from "../time.js";

export const log = $("log");

export function stampTime(node) {
  if (node.title) return;
  node.title = `at ${formatTime(state.frameAt)}`;
}

export function add(node) {
  stampTime(node);
  const atBottom = nearEnd(log);
  log.appendChild(node);
  if (atBottom) log.scrollTop = log.scrollHeight;
  return node;
}

export function follow() {
  log.addEventListener("scroll", () => { state.following = nearEnd(log); }, { passive: true });
  new MutationObserver(() => { if (state.following) log.scrollTop = log.scrollHeight; })
    .observe(log, { childList: true, subtree: true, characterData: true });
}

export function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

// A search hit opens the chat at its message (?at=<index>#m<index>; config.focus): an
// assistant's bubble carries its index (message.completed); a user's is found by its turn
export function focusFound() {
  const f = config.focus;
  if (!f) return false;
  let node = document.getElementById(`m${f.index}`);
  if (!node && f.turn_id && (f.role === "user" || f.role === "trigger")) {
    node = log.querySelector(`.msg[data-turn-id="${CSS.escape(f.turn_id)}"]`);
    if (node) {
      node.id = `m${f.index}`;
      node.dataset.index = f.index;
    }
  }
  if (!node) return false;
  node.classList.add("found");
  state.following = false; // the hit stays in view: what the replay still adds does not pull the log down
  node.scrollIntoView({ block: "center" });
  setTimeout(() => node.classList.remove("found"), 4000);
  return true;
}

// the bubble of a turn's message (the user's, or a trigger's)
export const bubbleOf = (turnId, kinds = ".msg") => log.querySelector(`${kinds}[data-turn-id="${CSS.escape(turnId)}"]`);
