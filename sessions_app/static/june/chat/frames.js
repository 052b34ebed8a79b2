// The pure part of frame handling (unit-tested in tests/js/chat.test.mjs): which frames are new,
// and where a streamed delta goes.

// a committed frame at or before the last one shown is old (the server dedupes; this guards a
// reconnect race): the new last seq, or null for a frame to drop. An ack's or an error's seq
// names the event its frame wrote (a message written while a person answers): that event comes
// after it, and is news.
export function nextSeq(lastSeq, frame) {
  if (typeof frame.seq !== "number" || frame.type === "ack" || frame.type === "error") return lastSeq;
  return frame.seq <= lastSeq ? null : frame.seq;
}

// a delta of a stream that began before the session's last reset (`resetSeq`): a turn of the
// archived conversation, still streaming until its worker sees the cancel. Dropped: drawn, it
// read as a reply of the new conversation, and kept the header at "running" for good (its end is
// logged in the archived generation, which the page no longer follows).
export function beforeReset(resetSeq, d) {
  return typeof d.base === "number" && d.base < resetSeq;
}

// A delta belongs to the stream after commit `base`; `offset` places it in that stream's text.
// A snapshot (offset 0, whole text) repairs a page that joined mid-stream. A page reloaded
// mid-stream starts from the text it held before the reload (`held()`, kept in sessionStorage):
// without it the first live deltas lie past a gap, and the bubble stayed empty until the next
// snapshot. A delta past a gap never draws an empty bubble.
//   current: the turn's stream ({base, text}) or undefined; done: the seq of the turn's last
//   message.completed or undefined.
// -> {kind: "stale"} | {kind: "gap"} | {kind: "draw", restart, start, text}: `restart` a new
//    bubble holding `start`; `text` the stream's new text, or null when the delta adds nothing.
export function planDelta(current, done, d, held) {
  if (done !== undefined && d.base !== null && d.base !== undefined && d.base < done) return { kind: "stale" };
  const offset = d.offset || 0;
  const restart = !current || current.base !== d.base;
  const start = restart ? held() : current.text;
  if (offset > start.length) return { kind: "gap" };
  const text = start.slice(0, offset) + d.text;
  return { kind: "draw", restart, start, text: text.length >= start.length ? text : null };
}

// streams kept over a reload: a kept stream whose turn still runs, with no commit since it
// began, is shown at once after the replay (the live deltas then continue it)
export function keptToShow(kept, lastSeq, isShown, status) {
  return kept.filter((k) => !isShown(k.turn_id) && status(k.turn_id) === "running" && k.base !== null
    && k.base === lastSeq && typeof k.text === "string" && k.text);
}

// the turn whose first reply comes next after position `index` opened there (a compaction's
// divider goes before its message)
export function openerTurn(firstIndex, index) {
  if (typeof index !== "number") return null;
  let best = null;
  let at = Number.POSITIVE_INFINITY;
  for (const [turnId, first] of firstIndex) {
    if (first > index && first < at) {
      best = turnId;
      at = first;
    }
  }
  return best;
}
