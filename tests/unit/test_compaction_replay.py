"""Crash at every commit boundary of a compacting turn (reactive and proactive): the replay
equals an uninterrupted run, and the summarizing call never runs again after its commit."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import Agent, ModelRequest, Role, ScriptedModel, StopReason, TurnInput, TurnStatus, reply, tool
from agents_app.runtime.compaction import view_tokens

from ._support import FakeClock, RecordingSink, assert_transcript_valid, delta_texts, make_executor
from .test_replay import REF, Crash, CrashingStore

#: commits of the compacting turn: open, compaction started, compact:<n>, model (tool call), tool, model + settle
REACTIVE = 6
#: open, model (final reply, not settled), compaction started, compact:<n>, settle
PROACTIVE = 5
COMPACT_COMMIT = {"reactive": 3, "proactive": 4}


class World:
    def __init__(self, kind: str, store: CrashingStore) -> None:
        self.kind, self.store = kind, store
        self.sink, self.clock = RecordingSink(), FakeClock()
        self.notes: list[str] = []

        @tool("note", "local write")
        def note(input: dict[str, Any], ctx: Any) -> Any:
            self.notes.append(input["text"])
            return {"noted": input["text"]}

        config = {"keep_last": 1}
        if kind == "proactive":
            config.update(context_window=90, threshold=0.5)
        self.agent = Agent("a", "instr", tools=[note], compaction=config)
        self.model = ScriptedModel(self.script)

    def script(self, request: ModelRequest) -> Any:
        if request.purpose == "compact":
            return reply("the summary", usage={"input_tokens": 30, "output_tokens": 4})
        last = request.messages[-1]
        usage = {"input_tokens": view_tokens(request.system, request.messages), "output_tokens": 3}
        if self.kind == "reactive" and last.text == "t3" and request.messages[0].role != Role.SUMMARY:
            return reply(stop=StopReason.CONTEXT_OVERFLOW)
        if self.kind == "reactive" and last.text == "t3":
            return reply("noting", ("note", {"text": "x"}), usage=usage)
        return reply(f"answer to {last.text or 'the tool'} " + "." * 80, usage=usage)

    def summaries(self) -> int:
        return sum(1 for r in self.model.requests if r.purpose == "compact")

    async def turn(self, turn_id: str, text: str) -> TurnStatus | None:
        await self.store.create_turn(REF, TurnInput(text), turn_id=turn_id, policy=self.agent.policy_for(None))
        return await self.drive(turn_id)

    async def drive(self, turn_id: str) -> TurnStatus | None:
        return await make_executor(self.store, self.agent, self.model, self.clock, self.sink).drive(turn_id)

    async def history(self) -> None:
        """Two earlier turns, run without crashing."""
        for n in (1, 2):
            assert await self.turn(f"t{n}", f"t{n}") == TurnStatus.COMPLETED

    async def snapshot(self) -> dict[str, Any]:
        rec = await self.store.get_turn("t3")
        return {
            "transcript": [m.to_json() for m in self.store.transcript(REF)],
            "steps": self.store.steps("t3"),
            "events": [(e.seq, e.event.to_json()) for e in await self.store.events(REF)],
            "turn": (rec.status, rec.text, rec.usage, rec.error),
            "boundary": (await self.store.load("t3")).boundary,
        }


async def baseline(kind: str) -> tuple[World, dict[str, Any]]:
    w = World(kind, CrashingStore())
    await w.history()
    before = w.store.commits
    assert await w.turn("t3", "t3") == TurnStatus.COMPLETED
    assert w.store.commits - before == (REACTIVE if kind == "reactive" else PROACTIVE)
    assert w.summaries() == 1
    return w, await w.snapshot()


@pytest.mark.parametrize(
    "kind,k", [("reactive", k) for k in range(1, REACTIVE + 1)] + [("proactive", k) for k in range(1, PROACTIVE + 1)]
)
async def test_crash_after_every_commit_of_a_compacting_turn(kind, k):
    base_world, expected = await baseline(kind)
    w = World(kind, CrashingStore())
    await w.history()
    w.store.crash_after = w.store.commits + k
    await w.store.create_turn(REF, TurnInput("t3"), turn_id="t3", policy=w.agent.policy_for(None))
    with pytest.raises(Crash):
        await w.drive("t3")
    w.clock.advance(60)
    await w.drive("t3")
    assert await w.snapshot() == expected
    assert w.summaries() == 1  # never called again after its commit (nor before: no crash came between)
    assert "".join(delta_texts(w.sink)) == "".join(delta_texts(base_world.sink))
    assert "the summary" not in "".join(delta_texts(w.sink))
    assert w.notes == base_world.notes
    assert_transcript_valid(w.store.transcript(REF))


@pytest.mark.parametrize("kind", ["reactive", "proactive"])
async def test_crash_after_the_summarizing_call_before_its_commit_redoes_it_once(kind):
    _, expected = await baseline(kind)
    w = World(kind, CrashingStore())
    await w.history()
    w.store.crash_before = w.store.commits + COMPACT_COMMIT[kind]
    await w.store.create_turn(REF, TurnInput("t3"), turn_id="t3", policy=w.agent.policy_for(None))
    with pytest.raises(Crash):
        await w.drive("t3")
    assert w.summaries() == 1
    w.clock.advance(60)
    assert await w.drive("t3") == TurnStatus.COMPLETED
    assert await w.snapshot() == expected  # one summary, one compaction.started, one boundary
    assert w.summaries() == 2


async def test_redelivery_of_a_compacted_turn_never_compacts_twice():
    w, expected = await baseline("reactive")
    assert await w.drive("t3") is None  # a duplicate delivery of a finished turn claims nothing
    assert await w.snapshot() == expected and w.summaries() == 1
