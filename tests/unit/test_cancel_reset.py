"""Cancel at each checkpoint boundary, replace, and reset."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents_app.runtime import (
    CANCELLED_RESULT,
    Agent,
    InMemorySessionStore,
    ModelRequest,
    RecordingSink,
    ScriptedModel,
    SessionRef,
    SessionStatus,
    SessionSuspendedError,
    TurnConflictError,
    TurnInput,
    TurnLoop,
    TurnStatus,
    reply,
    tool,
)

from ._support import NullDispatcher, assert_transcript_valid, delta_texts, logged, make_runtime, roles


class Gate:
    """An async tool that holds its turn running until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.open = asyncio.Event()
        gate = self

        @tool("wait", "waits for the gate")
        async def wait(input: dict[str, Any], ctx: Any) -> Any:
            gate.entered.set()
            await gate.open.wait()
            return "released"

        self.tool = wait

    async def wait_entered(self) -> None:
        await asyncio.wait_for(self.entered.wait(), 2)


def by_opening(request: ModelRequest) -> Any:
    """Turn "slow" calls the gate tool; every other message gets an echo."""
    last = request.messages[-1]
    if last.role == "tool":
        return reply("after the tool")
    if last.text == "slow":
        return reply("", ("wait", {}))
    return reply(f"echo {last.text}")


async def cancelled_reason(store: Any, turn_id: str) -> str | None:
    rec = await store.get_turn(turn_id)
    assert rec.status == TurnStatus.CANCELLED, rec.status
    return rec.error["reason"]


# -- cancel ---------------------------------------------------------------------------------


async def test_cancel_of_a_queued_turn_before_its_opening_commits():
    gate = Gate()
    model = ScriptedModel(by_opening)
    rt, store, sink = make_runtime(Agent("a", "instr", tools=[gate.tool]), model)
    s = rt.session("a", "s1")
    first = await s.start("slow")
    await gate.wait_entered()
    queued = await s.start("queued one")
    assert (await store.get_turn(queued)).status == TurnStatus.QUEUED
    await s.cancel(queued)
    assert await cancelled_reason(store, queued) == "requested"
    gate.open.set()
    assert (await s.result(first, timeout=5)).status == TurnStatus.COMPLETED
    await rt.dispatcher.idle()
    assert "queued one" not in [m.text for m in store.transcript(s.ref)]
    assert model.calls == 2  # both for the first turn
    assert [e.reason for e in await logged(store, s.ref, "turn.cancelled")] == ["requested"]
    assert [e.turn_id for e in await logged(store, s.ref, "turn.started")] == [first]


async def test_a_durable_cancel_on_a_claimed_turn_is_honoured_before_the_opening():
    store = InMemorySessionStore()
    ref = SessionRef("a", "s1")
    agent = Agent("a", "instr")
    model = ScriptedModel([reply("never")])
    await store.create_turn(ref, TurnInput("hi"), turn_id="t1")
    await store.claim("t1", owner="w1", attempt_id="x1", now=0.0, lease_seconds=10)
    await store.request_cancel("t1", "requested")  # a row, not a live signal
    loop = TurnLoop(agent=agent, store=store, sink=RecordingSink(), model=model)
    assert await loop.run("t1", "x1") == TurnStatus.CANCELLED
    assert store.transcript(ref) == [] and model.calls == 0
    assert [e.event.type for e in await store.events(ref)] == ["turn.cancelled"]


async def test_cancel_between_deltas_commits_no_reply():
    """Regression: in-process, a cancel stored during a stream was not signalled to the running
    attempt, so the whole reply streamed, committed, and the turn completed."""
    text = "a long reply that streams in many small pieces " * 4
    model = ScriptedModel([reply(text)], chunk=2, delay=0.001)
    rt, store, sink = make_runtime(Agent("a", "instr"), model)
    s = rt.session("a", "s1")
    seen: list[str] = []

    async def on_event(event: Any) -> None:
        if event.type == "message.delta" and not seen:
            seen.append(event.text)
            await s.cancel(event.turn_id)

    s.observe(on_event)
    tid = await s.start("hello")
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.CANCELLED and res.error == {"reason": "requested"}
    assert roles(store, s.ref) == ["user"]
    assert "model:1" not in store.steps(tid)
    assert [e.event.type for e in await store.events(s.ref)] == ["turn.started", "turn.cancelled"]
    assert seen == [text[:2]] and len(delta_texts(sink)) < len(text) // 2


async def test_cancel_between_tool_calls_keeps_committed_work_and_closes_the_batch():
    ran: list[str] = []

    @tool("step", "one step")
    async def step(input: dict[str, Any], ctx: Any) -> Any:
        ran.append(ctx.call_id)
        if ctx.call_id == "c0":
            await ctx.store.request_cancel(ctx.turn_id, "requested")
        return {"did": ctx.call_id}

    model = ScriptedModel([reply("three steps", ("step", {}), ("step", {}), ("step", {})), reply("never")])
    rt, store, sink = make_runtime(Agent("a", "instr", tools=[step]), model)
    s = rt.session("a", "s1")
    tid = await s.start("go")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.CANCELLED
    assert ran == ["c0"] and model.calls == 1
    transcript = store.transcript(s.ref)
    assert [(m.call_id, m.result) for m in transcript if m.role == "tool"] == [
        ("c0", {"did": "c0"}),
        ("c1", CANCELLED_RESULT),
        ("c2", CANCELLED_RESULT),
    ]
    assert_transcript_valid(transcript)
    assert {"tool:1:c0", "tool:1:c1", "tool:1:c2"} <= set(store.steps(tid))
    assert [e.reason for e in await logged(store, s.ref, "turn.cancelled")] == ["requested"]
    # a later turn can use the transcript
    model.script = [reply("fine")]
    model.requests.clear()
    assert (await s.turn("next", timeout=5)).status == TurnStatus.COMPLETED


# -- replace --------------------------------------------------------------------------------


async def test_replace_cancels_running_and_queued_turns_and_the_new_turn_runs():
    gate = Gate()
    model = ScriptedModel(by_opening)
    rt, store, sink = make_runtime(Agent("a", "instr", tools=[gate.tool]), model)
    s = rt.session("a", "s1")
    running = await s.start("slow")
    await gate.wait_entered()
    queued = await s.start("queued one")
    newer = await s.start("newer", replace=True)
    assert await cancelled_reason(store, queued) == "replaced"
    assert (await store.get_turn(running)).cancel_reason == "replaced"
    gate.open.set()
    res = await s.result(newer, timeout=5)
    assert res.status == TurnStatus.COMPLETED and res.text == "echo newer"
    assert await cancelled_reason(store, running) == "replaced"
    texts = [m.text for m in store.transcript(s.ref) if m.role in ("user", "assistant")]
    assert texts == ["slow", "", "newer", "echo newer"]  # the queued turn never opened
    assert_transcript_valid(store.transcript(s.ref))
    assert sorted((e.turn_id, e.reason) for e in await logged(store, s.ref, "turn.cancelled")) == sorted(
        [(running, "replaced"), (queued, "replaced")]
    )


def approval_agent() -> tuple[Agent, ScriptedModel]:
    @tool("deploy", "needs approval")
    async def deploy(input: dict[str, Any], ctx: Any) -> Any:
        return await ctx.request_input(id="approve", prompt="Deploy?", schema={"type": "boolean"})

    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "tool":
            return reply("deployed")
        return reply("", ("deploy", {})) if last.text == "deploy" else reply(f"echo {last.text}")

    return Agent("a", "instr", tools=[deploy]), ScriptedModel(script)


async def test_replace_never_cancels_a_parked_approval():
    agent, model = approval_agent()
    rt, store, sink = make_runtime(agent, model)
    s = rt.session("a", "s1")
    parked = await s.start("deploy")
    assert (await s.result(parked, timeout=5)).status == TurnStatus.SUSPENDED
    with pytest.raises(SessionSuspendedError):
        await s.start("never mind", replace=True)
    rec = await store.get_turn(parked)
    assert rec.status == TurnStatus.SUSPENDED and rec.cancel_reason is None
    assert len(await s.pending()) == 1
    await s.resume(parked, "approve", True)
    assert (await s.result(parked, timeout=5)).status == TurnStatus.COMPLETED


# -- reset ----------------------------------------------------------------------------------


async def test_reset_of_a_parked_session_archives_it_and_starts_fresh():
    agent, model = approval_agent()
    rt, store, sink = make_runtime(agent, model)
    s = rt.session("a", "s1")
    parked = await s.start("deploy")
    assert (await s.result(parked, timeout=5)).status == TurnStatus.SUSPENDED
    out = await s.reset()
    assert out == {"previous_session": "s1#g0", "generation": 1}
    assert await cancelled_reason(store, parked) == "reset"
    assert await s.pending() == []
    assert store.session_status(s.ref) == SessionStatus.NEW and store.transcript(s.ref) == []
    with pytest.raises(TurnConflictError):  # TurnNotResumable is a conflict
        await s.resume(parked, "approve", True)
    res = await s.turn("fresh start", timeout=5)
    assert res.status == TurnStatus.COMPLETED and res.text == "echo fresh start"
    assert [(str(m.role), m.text) for m in model.requests[-1].messages] == [("user", "fresh start")]
    assert [e.event.type for e in await store.events(s.ref)][:1] == ["session.reset"]
    assert (await s.reset())["previous_session"] == "s1#g1"


async def test_reset_cancels_queued_turns():
    dispatcher = NullDispatcher()
    model = ScriptedModel([reply("never")])
    rt, store, sink = make_runtime(Agent("a", "instr"), model, dispatcher=dispatcher)
    s = rt.session("a", "s1")
    ids = [await s.start("one"), await s.start("two")]
    await s.reset()
    assert [await cancelled_reason(store, t) for t in ids] == ["reset", "reset"]
    assert model.calls == 0


async def test_reset_cancels_a_running_turn_and_new_turns_queue_behind_it():
    gate = Gate()
    model = ScriptedModel(by_opening)
    rt, store, sink = make_runtime(Agent("a", "instr", tools=[gate.tool]), model)
    s = rt.session("a", "s1")
    running = await s.start("slow")
    await gate.wait_entered()
    assert (await s.reset())["generation"] == 1
    after = await s.start("after reset")
    assert (await store.get_turn(after)).status == TurnStatus.QUEUED
    gate.open.set()
    assert (await s.result(running, timeout=5)).status == TurnStatus.CANCELLED
    assert await cancelled_reason(store, running) == "reset"
    res = await s.result(after, timeout=5)
    assert res.status == TurnStatus.COMPLETED
    assert [(str(m.role), m.text) for m in model.requests[-1].messages] == [("user", "after reset")]
    assert roles(store, s.ref) == ["user", "assistant"]
