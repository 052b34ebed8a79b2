// The chat's pure parts under node:test (sessions_app/static/june/chat/): which frames are new,
// where a streamed delta goes, the session's status from its turns', what an answered card says,
// and the reload guard that keeps a page from reloading forever.
import assert from "node:assert/strict";
import { test } from "node:test";
import { beforeReset, keptToShow, nextSeq, openerTurn, planDelta } from "../../sessions_app/static/june/chat/frames.js";
import { decide } from "../../sessions_app/static/june/chat/reloads.js";
import { busy, sessionStatus } from "../../sessions_app/static/june/chat/state.js";
import { cancelledText, outcome, outcomeText, titleOf } from "../../sessions_app/static/june/chat/words.js";

test("a committed frame at or before the last one shown is dropped; an uncommitted one passes", () => {
  assert.equal(nextSeq(4, { seq: 5 }), 5);
  assert.equal(nextSeq(5, { seq: 5 }), null);
  assert.equal(nextSeq(5, { seq: 3 }), null);
  assert.equal(nextSeq(5, { type: "message.delta" }), 5);
  assert.equal(nextSeq(5, { seq: "6" }), 5); // only a number is a seq
  // an ack names the event its frame wrote, which is still to come: it moves nothing
  assert.equal(nextSeq(5, { type: "ack", for: "start", seq: 6 }), 5);
  assert.equal(nextSeq(5, { type: "person.message", seq: 6 }), 6);
});

test("deltas: appended at their offset, a snapshot repairs, a gap waits, a stale one is dropped", () => {
  const none = () => "";
  // the first delta of a stream: a new bubble
  assert.deepEqual(planDelta(undefined, undefined, { base: 3, offset: 0, text: "Hel" }, none),
    { kind: "draw", restart: true, start: "", text: "Hel" });
  const s = { base: 3, text: "Hel" };
  assert.deepEqual(planDelta(s, undefined, { base: 3, offset: 3, text: "lo" }, none), { kind: "draw", restart: false, start: "Hel", text: "Hello" });
  // a delta past what the page holds: nothing drawn until a snapshot fills the gap
  assert.deepEqual(planDelta(s, undefined, { base: 3, offset: 9, text: "x" }, none), { kind: "gap" });
  assert.deepEqual(planDelta(undefined, undefined, { base: 3, offset: 9, text: "x" }, none), { kind: "gap" });
  // a repeated delta (a reconnect's snapshot of less) never shortens the text
  assert.deepEqual(planDelta({ base: 3, text: "Hello" }, undefined, { base: 3, offset: 0, text: "He" }, none).text, null);
  assert.equal(planDelta({ base: 3, text: "Hello" }, undefined, { base: 3, offset: 0, text: "Hello, you" }, none).text, "Hello, you");
  // a delta of a stream before the turn's last completed message is old
  assert.deepEqual(planDelta(undefined, 7, { base: 5, offset: 0, text: "old" }, none), { kind: "stale" });
  assert.equal(planDelta(undefined, 7, { base: 7, offset: 0, text: "new" }, none).kind, "draw");
  // a new base (the stream after the next commit) starts a new bubble
  assert.equal(planDelta({ base: 3, text: "Hello" }, undefined, { base: 9, offset: 0, text: "Next" }, none).restart, true);
});

test("a page reloaded mid-stream continues from the text it kept", () => {
  const held = () => "kept text ";
  assert.deepEqual(planDelta(undefined, undefined, { base: 3, offset: 10, text: "goes on" }, held),
    { kind: "draw", restart: true, start: "kept text ", text: "kept text goes on" });
  const kept = [
    { turn_id: "t1", base: 8, text: "shown" },
    { turn_id: "t2", base: 7, text: "a commit came since" },
    { turn_id: "t3", base: 8, text: "" },
    { turn_id: "t4", base: 8, text: "ended" },
  ];
  const status = (id) => (id === "t4" ? "completed" : "running");
  assert.deepEqual(keptToShow(kept, 8, () => false, status).map((k) => k.turn_id), ["t1"]);
  assert.deepEqual(keptToShow(kept, 8, (id) => id === "t1", status), []);
});

test("the session's status: running beats waiting beats queued beats the last ending", () => {
  const of = (...pairs) => new Map(pairs);
  assert.deepEqual(sessionStatus(of(), null), { session: "idle", current: null, running: 0, waiting: 0 });
  assert.deepEqual(sessionStatus(of(["a", "completed"], ["b", "queued"], ["c", "running"]), null),
    { session: "running", current: "c", running: 1, waiting: 1 });
  assert.equal(sessionStatus(of(["a", "suspended"], ["b", "queued"]), null).session, "suspended");
  assert.equal(sessionStatus(of(["a", "suspended"], ["b", "queued"]), null).current, "b"); // Cancel: the first queued
  assert.equal(sessionStatus(of(["a", "failed"], ["b", "completed"]), null).session, "completed");
  assert.equal(sessionStatus(of(["a", "completed"]), "idle").session, "idle");
  assert.equal(busy(of(["a", "completed"])), false);
  assert.equal(busy(of(["a", "completed"], ["b", "suspended"])), true);
});

test("an answered card says who answered how", () => {
  assert.equal(outcomeText({ answer: true, name: "olga", via: "api" }), "Approved by olga over the API.");
  assert.equal(outcomeText({ answer: false, by: 7, via: "admin" }), "Denied by user 7 in the admin inbox.");
  assert.equal(outcomeText({ answer: { decision: "edit", input: { n: 2 } }, name: "o" }), 'Edited and approved by o: {"n":2}');
  assert.equal(outcomeText({ answer: { decision: "reject", message: "no" } }), "Rejected by someone: no");
  assert.equal(outcomeText({ answer: "blue" }), 'Answered by someone: "blue"');
  assert.deepEqual([true, false, { decision: "approve" }, { decision: "edit" }, { decision: "reject" }, 3].map(outcome),
    ["approved", "denied", "approved", "edited", "rejected", "answered"]);
  assert.equal(cancelledText(null, "replaced"), "Turn cancelled (replaced by a newer message).");
  assert.equal(cancelledText("hi", "requested"), "Queued message cancelled: “hi”");
});

test("the first message titles the session as the server does", () => {
  assert.equal(titleOf("  order   two\nmugs "), "order two mugs");
  const long = "word ".repeat(20);
  assert.equal(titleOf(long), `${"word ".repeat(11).trim()}…`);
  assert.equal(titleOf("x".repeat(80)), `${"x".repeat(59)}…`);
});

test("reloads: a click always reloads; the same automatic cause twice in a minute does not", () => {
  const t = 1_000_000;
  let r = decide([], "g2 is live", true, t);
  assert.equal(r.allow, true);
  assert.deepEqual(r.past, [{ at: t, cause: "g2 is live", automatic: true }]);
  r = decide(r.past, "g2 is live", true, t + 5000);
  assert.equal(r.allow, false); // the loop: the same cause reloaded the page seconds ago
  assert.equal(decide(r.past, "g2 is live", true, t + 61000).allow, true); // a minute later it may again
  assert.equal(decide(r.past, "a fork or a switch from this page", false, t + 1000).allow, true);
  assert.equal(decide(r.past, "g3 is live", true, t + 1000).allow, true); // a new generation is news
});

test("reloads: switching back and forth is followed each time; the very same switch twice is not", () => {
  const t = 2_000_000;
  let past = [];
  for (const [i, cause] of ["branch.switched to g4 at #10", "branch.switched to g5 at #12", "branch.switched to g4 at #14"].entries()) {
    const r = decide(past, cause, true, t + i * 1000);
    assert.equal(r.allow, true, cause);
    past = r.past;
  }
  assert.equal(decide(past, "branch.switched to g4 at #14", true, t + 5000).allow, false);
});

test("reloads: at most ten automatic ones a minute, whatever their causes; junk in storage is ignored", () => {
  const t = 5_000_000;
  let past = [];
  for (let i = 0; i < 10; i++) {
    const r = decide(past, `g${i}`, true, t + i);
    assert.equal(r.allow, true);
    past = r.past;
  }
  assert.equal(decide(past, "g99", true, t + 20).allow, false);
  assert.equal(decide(past, "clicked", false, t + 20).allow, true);
  for (const junk of [null, "x", { a: 1 }, [null, 3, "s"]]) assert.equal(decide(junk, "g1", true, t).allow, true);
  assert.ok(decide(Array.from({ length: 50 }, (_, i) => ({ at: t, cause: `c${i}`, automatic: false })), "c", false, t).past.length <= 21);
});

test("a compaction's divider goes before the message whose reply comes next", () => {
  const first = new Map([["t1", 1], ["t2", 5], ["t3", 9]]);
  assert.equal(openerTurn(first, 3), "t2");
  assert.equal(openerTurn(first, 0), "t1");
  assert.equal(openerTurn(first, 9), null);
  assert.equal(openerTurn(first, undefined), null);
});

test("a delta of a stream begun before the last reset is the archive's", () => {
  assert.equal(beforeReset(4, { base: 1 }), true);
  assert.equal(beforeReset(4, { base: 4 }), false); // the first turn after the reset
  assert.equal(beforeReset(0, { base: 0 }), false); // never reset
  assert.equal(beforeReset(4, { base: null }), false);
});
