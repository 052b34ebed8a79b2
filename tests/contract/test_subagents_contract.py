"""Subagents on every store (in-memory, Django on SQLite or PostgreSQL): Tx.spawn, a child's
report to its parent, the wake, the cascade, and whole trees driven by the runtime."""

from __future__ import annotations

import uuid

import pytest

from agents_app.runtime import InMemorySessionStore, SessionRef, StaleAttemptError, TurnInput, TurnStatus, subagents
from agents_app.runtime import events as ev
from agents_app.runtime.seams import ChildTurn, Phase
from tests.unit._subagents import Gates, build
from tests.unit._support import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

PARENT = SessionRef("boss", "tree")


@pytest.fixture(params=["memory", "django", "django-commit"])
def store(request):
    if request.param == "memory":
        return InMemorySessionStore()
    from sessions_app.store import DjangoSessionStore

    if request.param == "django":
        return DjangoSessionStore()

    class EveryUnitCommitted(DjangoSessionStore):
        async def atomic(self, turn_id, attempt_id, work):
            return await self.commit(turn_id, attempt_id, work)

    return EveryUnitCommitted()


def child(parent: str, index: int, *, key: str | None = None, call: str = "c0") -> ChildTurn:
    return ChildTurn(
        turn_id=subagents.child_turn_id(parent, call, index),
        session=SessionRef("researcher", key or f"sub:{parent}:{call}:{index}"),
        input=TurnInput(
            text=f"<task>\ngoal {index}\n</task>",
            kind="child",
            source="spawn",
            target={"parent_turn": parent, "call_id": call, "index": index, "goal": f"goal {index}"},
        ),
        step=subagents.step_key(parent, call, index),
        depth=1,
    )


async def running(store, ref: SessionRef, turn_id: str | None = None, now: float = 100.0) -> tuple[str, str]:
    turn_id = turn_id or uuid.uuid4().hex
    try:
        await store.get_turn(turn_id)
    except Exception:
        await store.create_turn(ref, TurnInput(text="go"), turn_id=turn_id)
    attempt = uuid.uuid4().hex
    assert await store.claim(turn_id, owner="w", attempt_id=attempt, now=now, lease_seconds=10) is not None
    return turn_id, attempt


async def parked_on(store, n: int) -> tuple[str, list[ChildTurn], list]:
    parent, attempt = await running(store, PARENT)
    kids = [child(parent, i) for i in range(n)]

    def work(tx):
        for k in kids:
            tx.spawn(k)
        tx.journal(Phase.PARKED, call_id="c0", children=n)
        tx.settle(TurnStatus.SUSPENDED, pending={"children": [k.turn_id for k in kids], "call_id": "c0"})

    commit = await store.commit(parent, attempt, work)
    return parent, kids, commit.runnable


async def settle(store, turn_id: str, status=TurnStatus.COMPLETED, text="done", usage=None):
    turn_id, attempt = await running(store, None, turn_id)

    def work(tx):
        tx.emit(ev.TurnCompleted(turn_id, text=text))
        tx.settle(status, text=text, usage=usage, error={"message": "broke"} if status == TurnStatus.FAILED else None)

    return await store.commit(turn_id, attempt, work)


async def test_spawn_creates_the_children_with_the_park(store):
    parent, kids, runnable = await parked_on(store, 2)
    assert sorted(runnable) == sorted((k.turn_id, k.session) for k in kids)
    rec = await store.get_turn(parent)
    assert rec.status == TurnStatus.SUSPENDED and rec.waiting == 2
    for k in kids:
        c = await store.get_turn(k.turn_id)
        assert (c.status, c.parent, c.depth, c.session, c.input.kind) == (
            TurnStatus.QUEUED,
            parent,
            1,
            k.session,
            "child",
        )
    assert await store.pending(PARENT) == []  # nothing for a person: the parent waits on turns
    # a parent parked on its children is not an approval park: the session takes new turns
    await store.create_turn(PARENT, TurnInput(text="next"), turn_id=uuid.uuid4().hex)


async def test_the_last_child_to_settle_wakes_the_parent_with_every_result(store):
    parent, kids, _ = await parked_on(store, 2)
    first = await settle(store, kids[0].turn_id, text="one", usage={"output_tokens": 3})
    assert first.runnable == [] and (await store.get_turn(parent)).waiting == 1
    second = await settle(store, kids[1].turn_id, TurnStatus.FAILED, text="")
    assert second.runnable == [(parent, PARENT)]
    rec = await store.get_turn(parent)
    assert rec.status == TurnStatus.QUEUED and rec.waiting == 0 and rec.pending is None
    assert rec.attempts == 0  # a wake starts a fresh retry budget
    spawned = (await store.load(parent)).spawned
    assert spawned["c0:0"] == {
        "status": "completed",
        "text": "one",
        "error": None,
        "turn_id": kids[0].turn_id,
        "usage": {"output_tokens": 3},
    }
    assert spawned["c0:1"]["status"] == "failed" and spawned["c0:1"]["error"] == "broke"


async def test_a_stale_child_completion_does_not_wake_a_cancelled_parent(store):
    parent, kids, _ = await parked_on(store, 1)
    claimed_child, attempt = await running(store, None, kids[0].turn_id)
    outcome = await store.request_cancel(parent, "requested")
    assert outcome.turn.status == TurnStatus.CANCELLED  # a waiting parent is cancelled at once
    assert outcome.cascaded == [kids[0].turn_id]  # the running child got the request
    assert (await store.get_turn(kids[0].turn_id)).cancel_reason == "parent"

    def work(tx):
        tx.settle(TurnStatus.COMPLETED, text="late")

    commit = await store.commit(claimed_child, attempt, work)
    assert commit.runnable == [] and commit.cancel_reason == "parent"
    assert (await store.get_turn(parent)).status == TurnStatus.CANCELLED


async def test_cancel_of_a_waiting_parent_cancels_its_queued_children_at_once(store):
    parent, kids, _ = await parked_on(store, 2)
    await store.request_cancel(parent, "requested")
    for k in kids:
        c = await store.get_turn(k.turn_id)
        assert (c.status, c.error) == (TurnStatus.CANCELLED, {"reason": "parent"})
    assert [e.event.type for e in await store.events(kids[0].session)] == ["turn.cancelled"]


async def test_reset_and_replace_of_the_parent_session_cascade(store):
    parent, kids, _ = await parked_on(store, 1)
    await store.reset(PARENT)
    assert (await store.get_turn(parent)).status == TurnStatus.CANCELLED
    assert (await store.get_turn(kids[0].turn_id)).status == TurnStatus.CANCELLED
    parent, kids, _ = await parked_on(store, 1)
    await store.create_turn(PARENT, TurnInput(text="instead"), turn_id=uuid.uuid4().hex, replace=True)
    assert (await store.get_turn(parent)).status == TurnStatus.CANCELLED
    assert (await store.get_turn(kids[0].turn_id)).status == TurnStatus.CANCELLED


async def test_a_child_cancelled_on_its_own_reports_cancelled_and_wakes_the_parent(store):
    parent, kids, _ = await parked_on(store, 1)
    outcome = await store.request_cancel(kids[0].turn_id, "requested")
    assert outcome.runnable == [(parent, PARENT)]
    assert (await store.load(parent)).spawned["c0:0"]["status"] == "cancelled"
    assert (await store.get_turn(parent)).status == TurnStatus.QUEUED


async def test_a_stale_attempt_spawns_nothing(store):
    parent, attempt = await running(store, PARENT)
    await running(store, PARENT, parent, now=200.0)  # another attempt took it over
    kid = child(parent, 0)

    def work(tx):
        tx.spawn(kid)
        tx.settle(TurnStatus.SUSPENDED, pending={"children": [kid.turn_id]})

    with pytest.raises(StaleAttemptError):
        await store.commit(parent, attempt, work)
    with pytest.raises(Exception):
        await store.get_turn(kid.turn_id)
    assert (await store.get_turn(parent)).waiting == 0


async def test_a_spawn_of_an_existing_child_id_leaves_it_alone(store):
    parent, kids, _ = await parked_on(store, 1)
    await settle(store, kids[0].turn_id, text="first")
    rec = await store.get_turn(parent)
    assert rec.status == TurnStatus.QUEUED
    turn_id, attempt = await running(store, None, parent)

    def work(tx):
        tx.spawn(kids[0])  # a replay naming the same child: nothing new
        tx.settle(TurnStatus.RUNNING)

    commit = await store.commit(parent, attempt, work)
    assert commit.runnable == [] and (await store.get_turn(parent)).waiting == 0
    assert (await store.get_turn(kids[0].turn_id)).text == "first"


# -- whole trees, driven by the runtime on each store -----------------------------------------------


async def test_a_tree_completes_on_every_store(store):
    rt, _, sink, seen = build(store=store)
    s = rt.session("boss", "t1")
    tid = await s.start("all a and b")
    res = await s.result(tid, timeout=20)
    assert res.status == TurnStatus.COMPLETED, res
    kids = [await store.get_turn(subagents.child_turn_id(tid, "c0", i)) for i in range(2)]
    assert [k.text for k in kids] == ["found a", "found b"]
    assert (await store.get_turn(tid)).usage == {
        "output_tokens": 5 + 7,
        "model_calls": 2,
        "children": {"output_tokens": 6, "model_calls": 2},
    }
    assert [k.input.target["budget"] for k in kids] == [{"model_calls": 24, "children": 11}] * 2  # stored, replayed
    await rt.dispatcher.idle()


async def test_cancel_of_a_tree_on_every_store(store):
    gates = Gates()
    rt, _, sink, seen = build(store=store, gates=gates)
    s = rt.session("boss", "t2")
    tid = await s.start("all hold a and hold b")
    await wait_until(lambda: gates.held == 2, timeout=20)
    await s.cancel(tid)
    gates.open.set()
    ids = [subagents.child_turn_id(tid, "c0", i) for i in range(2)]

    async def all_cancelled() -> bool:
        return all([(await store.get_turn(i)).status == TurnStatus.CANCELLED for i in ids])

    await wait_until(all_cancelled, timeout=20)
    assert (await store.get_turn(tid)).status == TurnStatus.CANCELLED
    await rt.dispatcher.idle()


@pytest.mark.parametrize("mode", ["one", "named"])
async def test_a_spawn_refuses_a_child_session_another_user_made(store, mode, django_user_model, caplog):
    """Issue 35 item 0: a spawn ran the child in whatever session had its key, whoever owned it
    (bob could read alice's delegated task and its findings, park it, cancel it). A child runs
    only in its parent owner's child session: one of another owner's (made before users were
    kept out of the namespace) refuses the spawn — the tool's error result, logged — and nothing
    is created in it. Both key kinds: one per spawn (from the turn id) and one the tool names
    (from the parent's agent and session: no turn id needed to squat it)."""
    if isinstance(store, InMemorySessionStore):
        pytest.skip("owners are the Django store's (the in-memory store has no users)")
    from types import SimpleNamespace

    from asgiref.sync import sync_to_async

    from sessions_app import models as m

    rt, _, sink, seen = build(store=store)
    ref = SessionRef("boss", "squat")
    tid = "f" * 32
    parent = SimpleNamespace(turn_id=tid, session=ref)
    key = subagents.child_key(parent, "c0", 0, "desk" if mode == "named" else None)
    bob = await sync_to_async(django_user_model.objects.create_user)("bob")
    squatted = await sync_to_async(m.Session.objects.create)(agent="researcher", key=key, owner=bob)
    s = rt.session(ref.agent, ref.key)
    await s.start(f"{mode} tides", turn_id=tid)
    res = await s.result(tid, timeout=20)
    assert res.status == TurnStatus.COMPLETED, res
    tool = [msg for msg in (await store.load(tid)).transcript if msg.role == "tool"][-1]
    assert tool.is_error and "spawn refused" in tool.result["error"], tool
    assert "spawn of call c0 refused" in caplog.text and "belongs to another user" in caplog.text
    assert await sync_to_async(m.Turn.objects.filter(session=squatted).count)() == 0
    assert await sync_to_async(m.Turn.objects.filter(parent_id=tid).count)() == 0
