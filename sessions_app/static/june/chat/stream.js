// Streamed replies: each delta placed in its stream (frames.js planDelta), the bubble drawn as
// the text grows, and the text streamed so far kept over a reload of the page (sessionStorage,
// this tab only).
import { config } from "./config.js";
import { el } from "./dom.js";
import { beforeReset, keptToShow, planDelta } from "./frames.js";
import { add, log } from "./log.js";
import { fill } from "./markdown.js";
import { state } from "./state.js";
import { setTurn } from "./turns.js";

const KEPT_KEY = `june:streams:${config.ws_path}`;
const kept = (() => {
  try {
    const value = JSON.parse(sessionStorage.getItem(KEPT_KEY) || "[]");
    sessionStorage.removeItem(KEPT_KEY);
    return Array.isArray(value) ? value : [];
  } catch {
    return [];
  }
})();

function keptText(turnId, base) {
  const k = kept.find((x) => x.turn_id === turnId && x.base === base);
  return k && typeof k.text === "string" ? k.text : "";
}

// a streaming bubble, appended with its text already in it; aria-busy: a screen reader reads
// the reply once it is complete, not at every delta
function streamBubble(turnId, base, text) {
  const bubble = el("div", "msg assistant streaming");
  bubble.setAttribute("aria-busy", "true");
  if (text) fill(bubble, text);
  const s = { base, text, el: add(bubble) };
  state.streams.set(turnId, s);
  return s;
}

export function streamDone(s) {
  s.el.classList.remove("streaming");
  s.el.removeAttribute("aria-busy");
}

export function onDelta(d) {
  if (beforeReset(state.resetSeq, d)) return;
  let s = state.streams.get(d.turn_id);
  const plan = planDelta(s, state.finalized.get(d.turn_id), d, () => keptText(d.turn_id, d.base));
  if (plan.kind !== "draw") return;
  if (plan.restart) {
    if (s) s.el.remove();
    s = streamBubble(d.turn_id, d.base, plan.start);
  }
  if (plan.text !== null) {
    s.text = plan.text;
    fill(s.el, plan.text);
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
  }
  if (state.turnStatus.get(d.turn_id) !== "running") setTurn(d.turn_id, "running");
}

// after the replay: a kept stream whose turn still runs is shown at once
export function restoreKept() {
  const show = keptToShow(kept.splice(0), state.lastSeq, (id) => state.streams.has(id), (id) => state.turnStatus.get(id));
  for (const k of show) streamBubble(k.turn_id, k.base, k.text);
}

export function keepOnLeave() {
  window.addEventListener("pagehide", () => {
    const now = [...state.streams.entries()].filter(([, s]) => s.text).map(([turnId, s]) => ({ turn_id: turnId, base: s.base, text: s.text }));
    try {
      if (now.length) sessionStorage.setItem(KEPT_KEY, JSON.stringify(now));
    } catch {
      /* full or off: a snapshot repairs it */
    }
  });
}

export function endTurn(turnId, status) {
  const s = state.streams.get(turnId);
  if (s) {
    streamDone(s);
    state.streams.delete(turnId);
  }
  setTurn(turnId, status);
}

// a cancelled turn's partial reply stays, marked discarded; replayed (a reload, a late tab), the
// text the turn streamed before its cancel is the event's
export function discardPartial(turnId, discarded) {
  let s = state.streams.get(turnId);
  if (!s?.text) {
    if (!discarded) return;
    s = { el: add(el("div", "msg assistant")) };
    fill(s.el, String(discarded), true);
  }
  streamDone(s);
  s.el.classList.add("discarded");
  s.el.title = "The turn was cancelled: this partial reply was discarded (it is not part of the conversation).";
}
