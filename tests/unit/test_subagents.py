"""Subagents on the fakes: spawn, parallel spawn, the parent's park and resume, results,
failures, cascades, limits, usage, a child's approval."""

from __future__ import annotations

import pytest

from agents_app.runtime import (
    Agent,
    InMemorySessionStore,
    LocalDispatcher,
    Runtime,
    ScriptedModel,
    SessionRef,
    TurnStatus,
    reply,
    subagents,
    tool,
)
from agents_app.runtime.limits import Limits

from ._subagents import Gates, build
from ._support import wait_until


def children_of(store, parent: str):
    return sorted(
        (t.record for t in store._turns.values() if t.record.parent == parent), key=lambda r: r.input.target["index"]
    )


async def status(store, turn_id: str) -> TurnStatus:
    return (await store.get_turn(turn_id)).status


async def run(rt, text: str, timeout: float = 5):
    s = rt.session("boss", "b1")
    tid = await s.start(text)
    return tid, await s.result(tid, timeout=timeout)


def tool_result(store, ref=SessionRef("boss", "b1")):
    return [m for m in store.transcript(ref) if m.role == "tool"][-1]


async def test_spawn_runs_one_child_turn_and_returns_its_result():
    rt, store, sink, seen = build()
    tid, res = await run(rt, "one tides")
    assert res.status == TurnStatus.COMPLETED
    assert tool_result(store).result == {"text": "found tides"}
    [child] = children_of(store, tid)
    assert child.status == TurnStatus.COMPLETED and child.text == "found tides"
    assert child.depth == 1 and child.input.kind == "child" and child.input.source == "spawn"
    assert child.session == SessionRef("researcher", f"sub:{tid}:c0:0")
    assert child.turn_id == subagents.child_turn_id(tid, "c0", 0)
    # the goal is task data in the child's first user message, never its system prompt
    [opening] = [m for m in store.transcript(child.session) if m.role == "user"]
    assert "<task>\ntides\n</task>" in opening.text
    request = seen["models"]["researcher"].requests[0]
    assert "tides" not in request.system and request.system == "You research."
    assert seen["delegate"] == 2  # parked once, ran again from the top with the result


async def test_spawn_all_runs_children_in_parallel_and_returns_results_in_order():
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start("all hold a and hold b")
    await wait_until(lambda: gates.held == 2)  # both children are in their model step at once
    rec = await store.get_turn(tid)
    assert rec.status == TurnStatus.SUSPENDED and rec.waiting == 2
    assert tid not in rt.live  # no attempt of the parent is running: no worker held
    assert await s.pending() == []  # nothing for a person to answer
    gates.open.set()
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.COMPLETED
    assert [r["text"] for r in tool_result(store).result] == ["found hold a", "found hold b"]
    assert [c.status for c in children_of(store, tid)] == [TurnStatus.COMPLETED] * 2
    assert seen["delegate"] == 2


async def test_gathered_spawns_park_once_on_all_of_them():
    rt, store, sink, seen = build()
    tid, res = await run(rt, "gather a and b and c")
    assert res.status == TurnStatus.COMPLETED
    assert [r["text"] for r in tool_result(store).result] == ["found a", "found b", "found c"]
    assert len(children_of(store, tid)) == 3 and seen["delegate"] == 2


async def test_sequential_spawns_park_once_per_child():
    rt, store, sink, seen = build()
    tid, res = await run(rt, "seq a and b")
    assert res.status == TurnStatus.COMPLETED
    assert [r["text"] for r in tool_result(store).result] == ["found a", "found b"]
    assert seen["delegate"] == 3
    assert [c.input.target["index"] for c in children_of(store, tid)] == [0, 1]


async def test_a_failed_child_is_an_error_result_the_model_reads():
    rt, store, sink, seen = build()
    tid, res = await run(rt, "all fail now and fine")
    assert res.status == TurnStatus.COMPLETED
    got = tool_result(store).result
    assert got[0]["status"] == "failed" and "the researcher broke" in got[0]["error"]
    assert got[1] == {"status": "completed", "text": "found fine", "error": None}
    # spawn (one child) raises ChildError: the tool's error result
    tid, res = await run(rt, "one fail again")
    assert res.status == TurnStatus.COMPLETED
    message = tool_result(store)
    assert message.is_error and "ChildError" in message.result["error"] and "failed" in message.result["error"]


async def test_a_fatal_tool_error_after_a_spawn_still_fails_the_parent():
    rt, store, sink, seen = build()
    tid, res = await run(rt, "fatal")
    assert res.status == TurnStatus.FAILED and "cannot go on" in res.error["message"]


async def test_usage_of_children_is_kept_apart_on_the_parent():
    """The parent's own calls at the top (a sum over turns counts each call once), its
    children's trees under ``children``."""
    rt, store, sink, seen = build()
    tid, res = await run(rt, "all a and b")
    child_usage = [c.usage for c in children_of(store, tid)]
    assert child_usage == [{"output_tokens": 3, "model_calls": 1}, {"output_tokens": 3, "model_calls": 1}]
    assert (await store.get_turn(tid)).usage == {
        "output_tokens": 5 + 7,
        "model_calls": 2,
        "children": {"output_tokens": 6, "model_calls": 2},
    }


async def test_cancel_of_the_parent_cascades_to_running_children():
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start("all hold a and hold b")
    await wait_until(lambda: gates.held == 2)
    rec = await s.cancel(tid)
    assert rec.status == TurnStatus.CANCELLED  # parked on children: cancelled at once
    children = children_of(store, tid)
    assert all(c.cancel_reason == "parent" for c in children)
    gates.open.set()
    await wait_until(lambda: all(c.status == TurnStatus.CANCELLED for c in children_of(store, tid)))
    assert (await store.get_turn(tid)).status == TurnStatus.CANCELLED  # a child's ending woke nothing
    assert [c.error for c in children_of(store, tid)] == [{"reason": "parent"}] * 2


async def test_cancel_of_the_parent_cancels_queued_children_at_once():
    """A child that has not started yet is cancelled with its parent, never run."""

    class Hold:
        def __init__(self) -> None:
            self.dispatched: list[str] = []
            self.inner = None

        async def dispatch(self, turn_id, session):
            if session.agent == "researcher":
                self.dispatched.append(turn_id)  # children stay queued
                return
            await self.inner.dispatch(turn_id, session)

        async def ring(self, turn_ids):
            return None

    hold = Hold()
    hold.inner = LocalDispatcher()
    rt, store, sink, seen = build(dispatcher=hold)
    hold.inner.executor = rt.executor
    s = rt.session("boss", "b1")
    tid = await s.start("all a and b")
    await wait_until(lambda: len(hold.dispatched) == 2)
    await s.cancel(tid)
    assert [(c.status, c.error) for c in children_of(store, tid)] == [(TurnStatus.CANCELLED, {"reason": "parent"})] * 2
    assert seen["children"] == []


async def test_reset_of_the_parent_cascades_and_a_late_child_does_not_wake_it():
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start("all hold a and fine")
    await wait_until(lambda: gates.held == 1)
    await wait_until(lambda: children_of(store, tid)[1].status == TurnStatus.COMPLETED)
    await s.reset()
    assert (await store.get_turn(tid)).status == TurnStatus.CANCELLED
    gates.open.set()
    await wait_until(lambda: children_of(store, tid)[0].status == TurnStatus.CANCELLED)
    assert (await store.get_turn(tid)).status == TurnStatus.CANCELLED


async def test_replace_of_the_parent_cascades_to_its_children():
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start("all hold a")
    await wait_until(lambda: gates.held == 1)
    second = await s.start("one b", replace=True)  # a parent parked on children is no approval park
    assert (await store.get_turn(tid)).status == TurnStatus.CANCELLED
    gates.open.set()
    assert (await s.result(second, timeout=5)).status == TurnStatus.COMPLETED
    assert children_of(store, tid)[0].status == TurnStatus.CANCELLED


async def test_a_child_cancelled_on_its_own_is_a_cancelled_result_for_the_parent():
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start("all hold a and fine")
    await wait_until(lambda: gates.held == 1)
    child = children_of(store, tid)[0]
    await rt.session("researcher", child.session.key).cancel(child.turn_id)
    gates.open.set()
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.COMPLETED
    got = tool_result(store).result
    assert got[0]["status"] == "cancelled" and got[1]["text"] == "found fine"


async def test_depth_is_bounded_with_a_clear_error():
    rt, store, sink, seen = build(max_depth=2)
    tid, res = await run(rt, "one deep")
    assert res.status == TurnStatus.COMPLETED
    depths = sorted(t.record.depth for t in store._turns.values())
    assert depths == [0, 1, 2]  # the depth-2 child's spawn was refused
    deepest = next(t.record for t in store._turns.values() if t.record.depth == 2)
    refused = [m for m in store.transcript(deepest.session) if m.role == "tool"][0]
    assert refused.is_error and "depth limit" in refused.result["error"]


async def test_fan_out_is_bounded_with_a_clear_error():
    rt, store, sink, seen = build()
    tid, res = await run(rt, "all " + " and ".join(str(n) for n in range(9)))
    assert res.status == TurnStatus.COMPLETED
    message = tool_result(store)
    assert message.is_error and "fan-out limit" in message.result["error"] and "at most 8" in message.result["error"]
    assert children_of(store, tid) == []


async def test_a_childs_request_input_parks_the_child_and_the_parent_resumes_after_it():
    rt, store, sink, seen = build()
    s = rt.session("boss", "b1")
    tid = await s.start("one ask first")
    await wait_until(
        lambda: bool(children_of(store, tid)) and children_of(store, tid)[0].status == TurnStatus.SUSPENDED
    )
    child = children_of(store, tid)[0]
    cs = rt.session("researcher", child.session.key)
    [pending] = await cs.pending()
    assert pending["request"]["id"] == "ok"
    assert (await store.get_turn(tid)).status == TurnStatus.SUSPENDED
    await cs.resume(child.turn_id, "ok", True)
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.COMPLETED
    assert tool_result(store).result == {"text": "ask first: {'answer': True}"}


async def test_a_duplicate_delivery_of_a_parked_parent_does_nothing():
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start("all hold a")
    await wait_until(lambda: gates.held == 1)
    assert await rt.executor.drive(tid) is None  # claim refuses a parked turn
    gates.open.set()
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    assert len(children_of(store, tid)) == 1 and seen["delegate"] == 2


async def test_spawn_from_a_sync_tool_is_refused():
    @tool("bad", "sync")
    def bad(input, ctx):
        return ctx.spawn("x", "y")

    model = ScriptedModel([reply("", ("bad", {})), reply("ok")])
    rt = Runtime(store=InMemorySessionStore(), agents={"a": Agent("a", tools=[bad])}, model_for=lambda a: model)
    s = rt.session("a", "k")
    res = await s.result(await s.start("go"), timeout=5)
    assert res.status == TurnStatus.FAILED and "spawn is only for async tools" in res.error["message"]


@pytest.mark.parametrize("text", ["one hold a", "all hold a and b"])
async def test_the_parent_session_is_running_not_parked_while_children_run(text):
    gates = Gates()
    rt, store, sink, seen = build(gates=gates)
    s = rt.session("boss", "b1")
    tid = await s.start(text)
    await wait_until(lambda: gates.held >= 1)
    assert str(store.session_status(s.ref)) == "running"
    queued = await s.start("one later")  # queues behind the parent
    gates.open.set()
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    assert (await s.result(queued, timeout=5)).status == TurnStatus.COMPLETED


async def test_a_parent_spawning_one_child_after_another_is_not_failed_by_the_retry_budget():
    """Regression: ``attempts`` counts claims and a woken parent is claimed again, so a tool that
    spawned more children one after the other than JUNE_MAX_ATTEMPTS failed with "retry budget
    exhausted". A wake starts a fresh budget."""
    rt, store, sink, seen = build()
    rt.executor.max_attempts = 3
    tid, res = await run(rt, "seq " + " and ".join(f"t{n}" for n in range(6)))
    assert res.status == TurnStatus.COMPLETED, res.error
    assert len(tool_result(store).result) == 6


async def test_a_cancel_that_lands_as_the_parent_parks_cancels_the_children_it_just_created():
    """Regression for the failure class "cancel during the child's start reports success and
    orphans a child that then starts": the cancel request reaches the parent's row between its
    spawn and the commit of its park; the park commits (the fence is the lease, not the cancel),
    so the loop must cancel the parent at once, which cascades to the new children."""

    class CancelAtPark(InMemorySessionStore):
        async def commit(self, turn_id, attempt_id, record):
            probe = _Probe()
            record(probe)
            if probe.spawns:
                await self.request_cancel(turn_id, "requested")
            return await super().commit(turn_id, attempt_id, record)

    rt, store, sink, seen = build(store=CancelAtPark())
    s = rt.session("boss", "b1")
    tid = await s.start("all a and b")
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.CANCELLED
    await rt.dispatcher.idle()
    children = children_of(store, tid)
    assert len(children) == 2
    assert [(c.status, c.error) for c in children] == [(TurnStatus.CANCELLED, {"reason": "parent"})] * 2
    assert seen["children"] == []  # no child ever ran its model


class _Probe:
    """A Tx that only notes whether a unit spawns."""

    def __init__(self) -> None:
        self.spawns = 0

    def spawn(self, child) -> None:
        self.spawns += 1

    def __getattr__(self, name):
        return lambda *a, **k: None


async def test_children_per_turn_are_capped_across_its_calls():
    """Pins 48 children from one turn through 6 calls (fan-out bounded each call, nothing the
    turn): ``limits["children"]`` counts a turn's children in all, and the call past it gets a
    model-readable error while the children before it ran."""

    rt, store, sink, seen = build()
    rt.agents["boss"].limits = Limits(children=3)
    tid, res = await run(rt, "seq a and b and c and d")
    assert res.status == TurnStatus.COMPLETED
    message = tool_result(store)
    assert message.is_error and "children limit" in message.result["error"] and "at most 3" in message.result["error"]
    assert len(children_of(store, tid)) == 3


async def test_a_tree_spends_within_its_root_turns_model_calls():
    """Children that loop stop at their share of the root's budget; the parent counts what they
    spent, so the whole tree makes at most the root's model calls (a tree cannot escape it)."""
    rt, store, sink, seen = build()
    rt.agents["boss"].limits = Limits(model_calls=10)
    tid, res = await run(rt, "all loop a and loop b")
    assert res.status == TurnStatus.COMPLETED
    children = children_of(store, tid)
    # the parent made 1 call and keeps 1 for its answer: 8 left, 4 each
    assert [c.input.target["budget"]["model_calls"] for c in children] == [4, 4]
    assert [(c.status, c.usage["model_calls"], c.usage["limited"]) for c in children] == [
        (TurnStatus.COMPLETED, 4, "model_calls")
    ] * 2
    calls = len(seen["models"]["boss"].requests) + len(seen["models"]["researcher"].requests)
    assert calls == 10
    parent = await store.get_turn(tid)
    assert parent.usage["model_calls"] == 2 and parent.usage["children"]["model_calls"] == 8
    assert parent.usage["limited"] == "model_calls"  # its answer was its last call: 2 + 8 = 10


async def test_a_spawn_the_budget_cannot_pay_for_is_refused_with_a_readable_error():
    rt, store, sink, seen = build()
    rt.agents["boss"].limits = Limits(model_calls=3)  # 1 spent, 1 kept for the answer: 1 left
    tid, res = await run(rt, "all a and b")
    assert res.status == TurnStatus.COMPLETED
    message = tool_result(store)
    assert message.is_error and "budget limit" in message.result["error"]
    assert children_of(store, tid) == []


async def test_a_childs_children_share_its_share():
    rt, store, sink, seen = build()
    rt.agents["boss"].limits = Limits(model_calls=12, children=5)
    tid, res = await run(rt, "one deep loop")
    assert res.status == TurnStatus.COMPLETED
    [child] = children_of(store, tid)
    assert child.input.target["budget"] == {"model_calls": 10, "children": 4}
    [grandchild] = children_of(store, child.turn_id)
    # the child made 1 call and keeps 1: 8 left for its one child; 4 - 1 children left under it
    assert grandchild.input.target["budget"] == {"model_calls": 8, "children": 3}
    total = len(seen["models"]["boss"].requests) + len(seen["models"]["researcher"].requests)
    assert total <= 12
