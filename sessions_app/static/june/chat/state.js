// The chat's state, in one place: what the page has drawn of the session, keyed by turn, call,
// request and frame. Every module of the chat reads and changes this one object; the pure
// decisions over it (the session's status, a delta's place) are functions below and in
// frames.js, unit-tested in tests/js/chat.test.mjs.
export const state = {
  lastSeq: 0, // the last committed event shown: a reconnect resumes after it
  resetSeq: 0, // the last session.reset shown: a stream older than it is the archive's
  ready: false, // the replay is over: events from now on are live
  openedAtEnd: false, // the first replay is in (the page scrolled to its newest message)
  following: true, // the log follows what grows at its end (log.js)
  currentTurn: null, // the turn the Cancel button cancels
  frameAt: new Date(), // when the frame being handled was committed (replayed frames say it)
  turnStatus: new Map(), // turn_id -> status
  streams: new Map(), // turn_id -> {base, text, el}: the message being streamed
  finalized: new Map(), // turn_id -> seq of its last message.completed
  firstIndex: new Map(), // turn_id -> position of its first reply (message.completed)
  tools: new Map(), // call_id -> timeline row
  cards: new Map(), // "turn:input" -> approval card
  pendingFrames: new Map(), // frame id -> card (to show an error on it)
  compacting: new Map(), // turn_id -> the "summarizing…" note of a compaction under way
  composerFrames: new Map(), // frame id -> text of a message the server has not accepted yet
  composerFiles: new Map(), // frame id -> attachment ids it carries
  cancelFrames: new Set(), // ids of cancel frames not answered yet
  queued: new Map(), // turn_id -> element in #queue (sent, not started yet)
};

// what a session.reset forgets (the queue and the composer's frames are cleared by their owners)
export function forgetConversation(s) {
  for (const key of ["streams", "tools", "cards", "finalized", "turnStatus", "compacting", "firstIndex"]) s[key].clear();
  s.currentTurn = null;
}

const OPEN = ["running", "suspended", "queued"];

// Each turn has its own status; the session's is running beats waiting-for-an-answer beats
// queued beats the last ending (`last`: a status given for no turn). `current`: the turn the
// header's Cancel cancels (the running one, else the first queued).
export function sessionStatus(turnStatus, last) {
  const of = (want) => [...turnStatus.entries()].filter(([, s]) => s === want).map(([id]) => id);
  const running = of("running");
  const parked = of("suspended");
  const waiting = of("queued");
  const ended = [...turnStatus.values()].filter((s) => !OPEN.includes(s));
  const session = running.length ? "running" : parked.length ? "suspended" : waiting.length ? "queued"
    : last || ended[ended.length - 1] || "idle";
  return { session, current: running[0] || waiting[0] || null, running: running.length, waiting: waiting.length };
}

// a turn is busy (a new message would wait behind it)
export const busy = (turnStatus) => [...turnStatus.values()].some((s) => OPEN.includes(s));
