"""A cancel interrupts an async tool in flight (issue 36, item 5): a `wait 90` that is cancelled
after 3 s used to hold its worker for the remaining 87 s, and another user's turn waited behind it.

The tool's run is raced against the attempt's cancel signal: the cancel cancels the tool's task
and the call gets the cancelled fill; a tool declared ``on_cancel="finish"`` runs to its end
first; a tool that swallows the cancel is abandoned after ``CANCEL_GRACE``; a park is never
turned into a cancel."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from agents_app.runtime import (
    CANCELLED_RESULT,
    Agent,
    InMemorySessionStore,
    ModelRequest,
    ScriptedModel,
    SessionRef,
    Signals,
    ToolDeclarationError,
    TurnExecutor,
    TurnInput,
    TurnStatus,
    control,
    define_action,
    reply,
    tool,
)
from agents_app.runtime.control import Park
from agents_app.runtime.subagents import SpawnPark

from ._subagents import build
from ._support import FakeClock, RecordingSink, assert_transcript_valid, event_types, logged, make_runtime
from .test_replay import Crash, CrashingStore
from .test_subagents import children_of

#: how long a cancelled turn may take to end here (the tools below would run for a minute)
PROMPT = 1.0


class Slow:
    """An async tool ``slow`` that runs for a minute unless interrupted (``how`` says how it
    takes a cancel), and a quick ``note`` to follow it in the batch."""

    def __init__(self, how: str = "plain", on_cancel: str = "interrupt") -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()  # for "finish": the work ends when the test says so
        self.stop = asyncio.Event()  # for "swallow": lets the abandoned task end with the test
        self.unwound = False
        self.ran: list[str] = []
        slow_tool = self

        @tool("slow", "a long remote call", on_cancel=on_cancel)
        async def slow(input: dict[str, Any], ctx: Any) -> Any:
            slow_tool.ran.append(ctx.call_id)
            slow_tool.entered.set()
            try:
                if how == "finish":
                    await slow_tool.release.wait()
                    return {"done": "all of it"}
                if how == "swallow":
                    while not slow_tool.stop.is_set():
                        try:
                            await asyncio.sleep(60)
                        except asyncio.CancelledError:
                            continue  # a tool that will not stop
                    return {"done": "late"}
                if how == "returns":
                    try:
                        await asyncio.sleep(60)
                    except asyncio.CancelledError:
                        return {"done": "partly"}  # caught the cancel and returned what it had
                await asyncio.sleep(60)
                return {"done": "never"}
            finally:
                slow_tool.unwound = True

        @tool("note", "a quick remote call")
        async def note(input: dict[str, Any], ctx: Any) -> Any:
            slow_tool.ran.append(ctx.call_id)
            return {"noted": True}

        self.tools = [slow, note]

    async def wait_entered(self) -> None:
        await asyncio.wait_for(self.entered.wait(), 2)


def two_calls(request: ModelRequest) -> Any:
    if request.messages[-1].role == "tool":
        return reply("after the tools")
    return reply("working", ("slow", {}), ("note", {}))


def tool_results(store: Any, ref: SessionRef) -> list[tuple[str, Any]]:
    return [(m.call_id, m.result) for m in store.transcript(ref) if m.role == "tool"]


async def test_a_cancel_interrupts_an_async_tool_in_flight_and_fills_the_batch():
    slow = Slow()
    model = ScriptedModel(two_calls)
    rt, store, sink = make_runtime(Agent("a", "instr", tools=slow.tools), model)
    s = rt.session("a", "s1")
    tid = await s.start("go")
    await slow.wait_entered()
    started = time.monotonic()
    await s.cancel(tid)
    res = await s.result(tid, timeout=5)
    assert time.monotonic() - started < PROMPT
    assert res.status == TurnStatus.CANCELLED and res.error == {"reason": "requested"}
    assert slow.unwound and slow.ran == ["c0"]  # the tool saw the cancel; the next call never ran
    assert tool_results(store, s.ref) == [("c0", CANCELLED_RESULT), ("c1", CANCELLED_RESULT)]
    assert not any(m.is_error for m in store.transcript(s.ref) if m.role == "tool")
    assert {"tool:1:c0", "tool:1:c1"} <= set(store.steps(tid))
    assert_transcript_valid(store.transcript(s.ref))
    assert await event_types(store, s.ref) == [
        "turn.started",
        "message.completed",
        "action.requested",
        "action.requested",
        "turn.cancelled",
    ]
    assert model.calls == 1
    # the session carries on: the next turn's model reads a valid transcript
    model.script = [reply("fine")]
    model.requests.clear()
    assert (await s.turn("next", timeout=5)).status == TurnStatus.COMPLETED


async def test_a_durable_cancel_seen_at_a_heartbeat_interrupts_the_tool_too():
    """No live signal: the request is only a row, read back by the attempt's heartbeat."""
    slow = Slow()
    store = InMemorySessionStore()
    agent = Agent("a", "instr", tools=slow.tools)
    ref = SessionRef("a", "s1")
    await store.create_turn(ref, TurnInput("go"), turn_id="t1", policy=agent.policy_for(None))
    executor = TurnExecutor(
        store=store,
        sink=RecordingSink(),
        agent_for=lambda name: agent,
        model_for=lambda a: ScriptedModel(two_calls),
        clock=FakeClock(),
        lease_seconds=0.15,
    )
    driving = asyncio.ensure_future(executor.drive("t1"))
    await slow.wait_entered()
    await store.request_cancel("t1", "requested")
    assert await asyncio.wait_for(driving, PROMPT) == TurnStatus.CANCELLED
    assert tool_results(store, ref) == [("c0", CANCELLED_RESULT), ("c1", CANCELLED_RESULT)]


async def test_a_tool_declared_on_cancel_finish_runs_to_its_end_and_its_result_is_kept():
    slow = Slow("finish", on_cancel="finish")
    model = ScriptedModel(two_calls)
    rt, store, sink = make_runtime(Agent("a", "instr", tools=slow.tools), model)
    s = rt.session("a", "s1")
    tid = await s.start("go")
    await slow.wait_entered()
    await s.cancel(tid)
    for _ in range(20):  # the loop gets every chance to act on the cancel; it waits for the tool
        await asyncio.sleep(0)
    assert (await store.get_turn(tid)).status == TurnStatus.RUNNING and not slow.unwound
    slow.release.set()
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.CANCELLED and res.error == {"reason": "requested"}
    # its real result, then the cancel at the next boundary: the rest of the batch is filled
    assert tool_results(store, s.ref) == [("c0", {"done": "all of it"}), ("c1", CANCELLED_RESULT)]
    assert slow.ran == ["c0"] and model.calls == 1
    assert [e.call_id for e in await logged(store, s.ref, "action.completed")] == ["c0"]
    assert_transcript_valid(store.transcript(s.ref))


async def test_a_tool_that_swallows_the_cancel_is_abandoned_after_the_grace(monkeypatch, caplog):
    monkeypatch.setattr(control, "CANCEL_GRACE", 0.05)
    slow = Slow("swallow")
    rt, store, sink = make_runtime(Agent("a", "instr", tools=slow.tools), ScriptedModel(two_calls))
    s = rt.session("a", "s1")
    tid = await s.start("go")
    await slow.wait_entered()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agents_app.runtime.loop_tools"):
        await s.cancel(tid)
        res = await s.result(tid, timeout=5)
    assert time.monotonic() - started < PROMPT
    assert res.status == TurnStatus.CANCELLED
    assert tool_results(store, s.ref) == [("c0", CANCELLED_RESULT), ("c1", CANCELLED_RESULT)]
    assert any("ignored the cancel" in r.getMessage() and "slow" in r.getMessage() for r in caplog.records)
    abandoned = [t for t in control._ABANDONED if not t.done()]
    assert len(abandoned) == 1 and not slow.unwound  # still running, held until it ends
    slow.stop.set()
    abandoned[0].cancel()
    await asyncio.wait(abandoned, timeout=2)
    assert slow.unwound and not control._ABANDONED


async def test_a_tool_that_catches_the_cancel_and_returns_keeps_its_result():
    """It ran to its end (within the grace): what it returned is what happened."""
    slow = Slow("returns")
    rt, store, sink = make_runtime(Agent("a", "instr", tools=slow.tools), ScriptedModel(two_calls))
    s = rt.session("a", "s1")
    tid = await s.start("go")
    await slow.wait_entered()
    await s.cancel(tid)
    assert (await s.result(tid, timeout=5)).status == TurnStatus.CANCELLED
    assert tool_results(store, s.ref) == [("c0", {"done": "partly"}), ("c1", CANCELLED_RESULT)]


async def test_a_park_that_comes_with_a_cancel_signal_is_still_a_park():
    """The race prefers the tool's own outcome: a ``request_input`` park raised as the signal
    lands is never turned into a cancelled fill (and the tool runs again, answered, on resume)."""

    @tool("deploy", "needs approval")
    async def deploy(input: dict[str, Any], ctx: Any) -> Any:
        try:
            return {"approved": await ctx.request_input(id="ok", prompt="Deploy?", schema={"type": "boolean"})}
        except Park:
            rt.live[ctx.turn_id].cancel("requested")  # the signal lands in the same moment
            raise

    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        return reply("deployed") if last.role == "tool" else reply("", ("deploy", {}))

    rt, store, sink = make_runtime(Agent("a", "instr", tools=[deploy]), ScriptedModel(script))
    s = rt.session("a", "s1")
    tid = await s.start("deploy")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.SUSPENDED
    assert len(await s.pending()) == 1 and tool_results(store, s.ref) == []
    await s.resume(tid, "ok", True)
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    assert tool_results(store, s.ref) == [("c0", {"approved": True})]


async def test_a_spawn_park_that_comes_with_a_cancel_signal_is_still_a_park():
    rt, store, sink, seen = build()
    delegate = rt.agent("boss").tools["delegate"]
    original = delegate.run
    signalled: list[str] = []

    async def run(input: dict[str, Any], ctx: Any) -> Any:
        try:
            return await original(input, ctx)
        except SpawnPark:
            signalled.append(ctx.turn_id)
            rt.live[ctx.turn_id].cancel("requested")  # the signal lands in the same moment
            raise

    delegate.run = run
    s = rt.session("boss", "b1")
    tid = await s.start("one topic")
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.COMPLETED, res.error
    assert seen["children"] == ["topic"] and signalled == [tid]
    assert [m.result for m in store.transcript(s.ref) if m.role == "tool"] == [{"text": "found topic"}]


async def test_a_cancel_before_the_spawn_parks_cancels_the_turn_and_spawns_nothing():
    """The other side of the race: the cancel comes first (the tool has not parked yet), so the
    tool is interrupted where it awaits and no child is created."""
    rt, store, sink, seen = build()
    delegate = rt.agent("boss").tools["delegate"]
    original = delegate.run

    async def run(input: dict[str, Any], ctx: Any) -> Any:
        await rt.session("boss", "b1").cancel(ctx.turn_id)
        return await original(input, ctx)

    delegate.run = run
    s = rt.session("boss", "b1")
    tid = await s.start("one topic")
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.CANCELLED and res.error == {"reason": "requested"}
    assert tool_results(store, s.ref) == [("c0", CANCELLED_RESULT)]
    assert seen["children"] == [] and children_of(store, tid) == []


# -- crash and replay ------------------------------------------------------------------------


async def crash_mid_cancel(crash: dict[str, int]) -> tuple[CrashingStore, Slow, TurnStatus | None]:
    """Drive a turn whose ``slow`` call is interrupted by a live cancel; the store dies at the
    commit ``crash`` names (3 = the cancel's unit: open, model:1, then it); then replay."""
    slow = Slow()
    store = CrashingStore(**crash)
    agent = Agent("a", "instr", tools=slow.tools)
    clock = FakeClock()
    live: dict[str, Signals] = {}
    executor = TurnExecutor(
        store=store,
        sink=RecordingSink(),
        agent_for=lambda name: agent,
        model_for=lambda a: ScriptedModel(two_calls),
        clock=clock,
        lease_seconds=30.0,
        on_signals=lambda tid, signals: (live.__setitem__(tid, signals), lambda: None)[1],
    )
    await store.create_turn(SessionRef("a", "s1"), TurnInput("go"), turn_id="t1", policy=agent.policy_for(None))
    driving = asyncio.ensure_future(executor.drive("t1"))
    await slow.wait_entered()
    await store.request_cancel("t1", "requested")
    live["t1"].cancel("requested")
    with pytest.raises(Crash):
        await asyncio.wait_for(driving, PROMPT)
    clock.advance(60)  # the dead attempt's lease expires; another worker re-claims
    return store, slow, await executor.drive("t1")


@pytest.mark.parametrize(
    "crash, replayed",
    [
        ({"crash_before": 3}, TurnStatus.CANCELLED),  # the replay cancels at its first boundary
        ({"crash_after": 3}, None),  # the cancel committed: nothing to claim
    ],
    ids=["before-the-cancel-commits", "after-it-commits"],
)
async def test_a_crash_mid_cancel_replays_to_the_same_cancelled_turn(crash, replayed):
    store, slow, status = await crash_mid_cancel(crash)
    ref = SessionRef("a", "s1")
    assert status == replayed
    rec = await store.get_turn("t1")
    assert rec.status == TurnStatus.CANCELLED and rec.error == {"reason": "requested"}
    assert tool_results(store, ref) == [("c0", CANCELLED_RESULT), ("c1", CANCELLED_RESULT)]
    assert slow.ran == ["c0"]  # nothing ran again
    assert_transcript_valid(store.transcript(ref))
    assert (await event_types(store, ref)).count("turn.cancelled") == 1


# -- declarations ----------------------------------------------------------------------------


def test_on_cancel_is_declared_like_on_interrupt():
    @define_action(on_cancel="finish")
    async def charge(amount: int) -> dict:
        return {"charged": amount}

    assert charge.on_cancel == "finish" and charge.is_async
    assert tool("t", "d")(lambda_async).on_cancel == "interrupt"
    with pytest.raises(ToolDeclarationError, match="on_cancel must be 'interrupt' or 'finish'"):
        tool("t", "d", on_cancel="wait")(lambda_async)
    with pytest.raises(ToolDeclarationError, match="on_cancel='finish' is for async tools"):
        tool("t", "d", on_cancel="finish")(lambda input, ctx: None)
    with pytest.raises(ToolDeclarationError, match="on_cancel='finish' is for async tools"):
        define_action(lambda_sync, on_cancel="finish")


async def lambda_async(input: dict[str, Any], ctx: Any) -> Any:
    return None


def lambda_sync(x: int) -> int:
    return x
