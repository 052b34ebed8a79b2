"""Crash and replay: stop the engine at every step boundary, redeliver the turn, and compare
with an uninterrupted run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from agents_app.runtime import (
    INTERRUPTED_TOOL_RESULT,
    Agent,
    InMemorySessionStore,
    ModelRequest,
    RecordingSink,
    ScriptedModel,
    SessionRef,
    TurnInput,
    TurnStatus,
    reply,
    tool,
)

from ._support import FakeClock, assert_transcript_valid, delta_texts, make_executor

REF = SessionRef("a", "s1")
FIRST_TEXT, FINAL_TEXT = "let me check both", "all done here"
#: open, model:1, tool:1:c0, tool:1:c1, model:4 (+ settle)
COMMITS = 5


class Crash(BaseException):
    """Stands for the process dying (a BaseException: nothing in the engine may catch it)."""


class CrashingStore(InMemorySessionStore):
    """Dies right after its ``crash_after``-th successful commit (or just before the
    ``crash_before``-th), once."""

    def __init__(self, *, crash_after: int | None = None, crash_before: int | None = None) -> None:
        super().__init__()
        self.crash_after, self.crash_before = crash_after, crash_before
        self.commits = 0

    async def atomic(self, turn_id: str, attempt_id: str | None, work: Any, **kw: Any) -> Any:
        if self.crash_before is not None and self.commits + 1 == self.crash_before:
            self.crash_before = None
            raise Crash(f"before commit {self.commits + 1}")
        commit = await super().atomic(turn_id, attempt_id, work, **kw)
        self.commits += 1
        if self.crash_after is not None and self.commits == self.crash_after:
            self.crash_after = None
            raise Crash(f"after commit {self.commits}")
        return commit


@dataclass
class World:
    store: CrashingStore
    notes: list[str] = field(default_factory=list)
    pings: int = 0
    ran: list[str] = field(default_factory=list)
    sink: RecordingSink = field(default_factory=RecordingSink)
    clock: FakeClock = field(default_factory=FakeClock)
    model: ScriptedModel | None = None
    agent: Agent | None = None

    async def drive(self) -> TurnStatus | None:
        return await make_executor(self.store, self.agent, self.model, self.clock, self.sink).drive("t1")


def script(request: ModelRequest) -> Any:
    if request.messages[-1].role == "tool":
        return reply(FINAL_TEXT, usage={"output_tokens": 2})
    return reply(FIRST_TEXT, ("note", {"text": "x"}), ("ping", {"host": "h"}), usage={"output_tokens": 5})


def build(store: CrashingStore, *, ping_on_interrupt: str = "rerun", crash_in_ping: bool = False) -> World:
    w = World(store)

    @tool("note", "local write")
    def note(input: dict[str, Any], ctx: Any) -> Any:
        w.ran.append("note")
        w.notes.append(input["text"])
        return {"noted": input["text"]}

    @tool("ping", "remote call", on_interrupt=ping_on_interrupt)
    async def ping(input: dict[str, Any], ctx: Any) -> Any:
        w.ran.append("ping")
        w.pings += 1
        if crash_in_ping and w.pings == 1:
            raise Crash("inside ping")
        return {"pong": input["host"]}

    w.agent = Agent("a", "instr", tools=[note, ping])
    w.model = ScriptedModel(script)
    return w


async def start(w: World) -> None:
    await w.store.create_turn(REF, TurnInput("hello"), turn_id="t1", policy=w.agent.policy_for(None))


async def snapshot(w: World) -> dict[str, Any]:
    rec = await w.store.get_turn("t1")
    return {
        "transcript": [m.to_json() for m in w.store.transcript(REF)],
        "steps": w.store.steps("t1"),
        "events": [(e.seq, e.event.to_json()) for e in await w.store.events(REF)],
        "turn": (rec.status, rec.text, rec.usage, rec.error),
    }


@pytest.fixture
async def baseline() -> dict[str, Any]:
    w = build(CrashingStore())
    await start(w)
    assert await w.drive() == TurnStatus.COMPLETED
    assert w.store.commits == COMMITS and w.notes == ["x"] and w.pings == 1
    return await snapshot(w)


async def crash_then_replay(w: World) -> TurnStatus | None:
    await start(w)
    with pytest.raises(Crash):
        await w.drive()
    w.clock.advance(60)  # the dead attempt's lease expires; another worker re-claims
    return await w.drive()


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_crash_after_every_commit_replays_to_the_uninterrupted_result(k, baseline):
    w = build(CrashingStore(crash_after=k))
    status = await crash_then_replay(w)
    assert status == (None if k == COMMITS else TurnStatus.COMPLETED)  # nothing left after the last
    assert await snapshot(w) == baseline
    assert w.notes == ["x"]  # the sync tool's effect happened exactly once
    assert w.pings == 1  # a crash after its commit never re-runs it
    # a committed model step is never streamed again: each text's deltas went out once
    assert "".join(delta_texts(w.sink)) == FIRST_TEXT + FINAL_TEXT
    assert w.model.calls == 2
    assert_transcript_valid(w.store.transcript(REF))


async def test_crash_before_the_opening_commits_replays_from_scratch(baseline):
    w = build(CrashingStore(crash_before=1))
    assert await crash_then_replay(w) == TurnStatus.COMPLETED
    assert await snapshot(w) == baseline
    assert w.ran == ["note", "ping"] and w.model.calls == 2


async def test_crash_in_the_middle_of_the_batch_resumes_only_the_remaining_calls():
    w = build(CrashingStore(crash_after=3))  # tool:1:c0 committed, c1 not run
    await start(w)
    with pytest.raises(Crash):
        await w.drive()
    assert w.ran == ["note"]
    w.clock.advance(60)
    assert await w.drive() == TurnStatus.COMPLETED
    assert w.ran == ["note", "ping"]
    assert [m.call_id for m in w.store.transcript(REF) if m.role == "tool"] == ["c0", "c1"]


async def test_replay_does_not_append_the_opening_twice():
    w = build(CrashingStore(crash_after=1))
    assert await crash_then_replay(w) == TurnStatus.COMPLETED
    openings = [m for m in w.store.transcript(REF) if m.role == "user"]
    assert [m.text for m in openings] == ["hello"]
    assert [e.event.type for e in await w.store.events(REF)].count("turn.started") == 1


async def test_replay_with_the_loop_directly_and_no_attempt_id(baseline):
    """The loop alone (no executor, no lease) is redeliverable too."""
    from agents_app.runtime import TurnLoop

    w = build(CrashingStore(crash_after=2))
    await start(w)

    def loop() -> TurnLoop:
        return TurnLoop(agent=w.agent, store=w.store, sink=w.sink, model=w.model)

    with pytest.raises(Crash):
        await loop().run("t1", None)
    assert await loop().run("t1", None) == TurnStatus.COMPLETED
    assert await snapshot(w) == baseline
    assert "".join(delta_texts(w.sink)) == FIRST_TEXT + FINAL_TEXT


async def test_async_tool_in_flight_with_on_interrupt_report_gets_the_interrupted_marker():
    w = build(CrashingStore(), ping_on_interrupt="report", crash_in_ping=True)
    assert await crash_then_replay(w) == TurnStatus.COMPLETED
    assert w.pings == 1  # not re-run
    assert w.notes == ["x"]
    ping = [m for m in w.store.transcript(REF) if m.role == "tool" and m.call_id == "c1"]
    assert [(m.result, m.is_error) for m in ping] == [(INTERRUPTED_TOOL_RESULT, True)]
    # the model read the marker and decided
    assert w.model.requests[-1].messages[-1].result == INTERRUPTED_TOOL_RESULT
    done = [e.event for e in await w.store.events(REF) if e.event.type == "action.completed"]
    assert done[-1].call_id == "c1" and done[-1].error == INTERRUPTED_TOOL_RESULT["error"]


async def test_async_tool_in_flight_is_re_run_by_default():
    w = build(CrashingStore(), crash_in_ping=True)
    assert await crash_then_replay(w) == TurnStatus.COMPLETED
    assert w.pings == 2 and w.notes == ["x"]
    ping = [m for m in w.store.transcript(REF) if m.role == "tool" and m.call_id == "c1"]
    assert [(m.result, m.is_error) for m in ping] == [({"pong": "h"}, False)]


async def test_a_second_replay_still_reports_the_interrupted_call():
    """The marker is decided from the journal of the attempt that died, not the latest one."""
    w = build(CrashingStore(), ping_on_interrupt="report", crash_in_ping=True)
    await start(w)
    with pytest.raises(Crash):
        await w.drive()
    w.clock.advance(60)
    # a second attempt dies before it commits anything
    w.store.crash_before = w.store.commits + 1
    with pytest.raises(Crash):
        await w.drive()
    w.clock.advance(60)
    assert await w.drive() == TurnStatus.COMPLETED
    assert w.pings == 1
    assert [m.result for m in w.store.transcript(REF) if m.call_id == "c1"] == [INTERRUPTED_TOOL_RESULT]


class JournalingStore(CrashingStore):
    """Counts the journal writes made outside a checkpoint (``SessionStore.journal``)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.journaled: list[tuple[str, dict[str, Any]]] = []

    async def journal(self, turn_id: str, attempt_id: str | None, phase: Any, **data: Any) -> None:
        self.journaled.append((str(phase), data))
        await super().journal(turn_id, attempt_id, phase, **data)


def with_journal_seen(w: World) -> list[tuple[str, str, str]]:
    """(phase, the journal's stream key, the request's) as each model call starts streaming."""
    seen: list[tuple[str, str, str]] = []
    scripted = w.model

    class Watching:
        def stream(self, request: ModelRequest) -> Any:
            turn = w.store._turn("t1").record
            seen.append((str(turn.phase), turn.journal.get("stream_key", ""), request.stream_key))
            return scripted.stream(request)

    w.model = Watching()
    return seen


async def test_each_model_call_is_announced_by_the_checkpoint_before_it():
    """The opening and the last tool result's checkpoint record provider_started with the next
    model call's stream key: the model steps write no journal of their own."""
    w = build(JournalingStore())
    seen = with_journal_seen(w)
    await start(w)
    assert await w.drive() == TurnStatus.COMPLETED
    assert w.store.journaled == []
    attempt = (await w.store.get_turn("t1")).attempt_id
    assert seen == [("provider_started", key, key) for key in (f"t1:model:1:{attempt}", f"t1:model:4:{attempt}")]
    assert w.store.commits == COMMITS


@pytest.mark.parametrize("k", [1, 4])
async def test_a_model_step_an_attempt_resumes_at_writes_its_own_journal(k):
    """A crash right after the checkpoint that announced a model call: the next attempt starts
    at that model step, which no checkpoint of its own announced, so it records provider_started
    (with its own stream key) as the call starts."""
    w = build(JournalingStore(crash_after=k))
    seen = with_journal_seen(w)
    await start(w)
    with pytest.raises(Crash):
        await w.drive()
    w.clock.advance(60)
    assert await w.drive() == TurnStatus.COMPLETED
    attempt = (await w.store.get_turn("t1")).attempt_id
    step = 1 if k == 1 else 4
    assert w.store.journaled == [("provider_started", {"stream_key": f"t1:model:{step}:{attempt}"})]
    assert seen[-1 if k == 4 else 0][2] == f"t1:model:{step}:{attempt}"
