"""Crash at every commit boundary of a parent and its children: redeliver whatever is runnable
(as the sweeper would) and check that each (parent turn, call id, spawn index) got exactly one
child turn, that each child ran its model once per committed step, and that the parent
completes once with the uninterrupted result."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import InMemorySessionStore, TurnStatus
from agents_app.runtime.seams import FINAL_STATUSES

from ._subagents import build
from ._support import FakeClock, assert_transcript_valid
from .test_replay import Crash, CrashingStore


class Shelf:
    """A dispatcher that drives nothing: the test redelivers by hand."""

    async def dispatch(self, turn_id, session) -> None:
        return None

    async def ring(self, turn_ids) -> None:
        return None


async def drain(rt: Any, store: CrashingStore, clock: FakeClock, crashes: list[str]) -> None:
    """Drive every queued turn (and every expired lease) until nothing is left: the sweeper's
    job after a crash, done by hand."""
    for _ in range(100):
        todo = [
            t.record.turn_id
            for t in sorted(store._turns.values(), key=lambda t: t.order)
            if t.record.status in (TurnStatus.QUEUED, TurnStatus.RUNNING)
        ]
        if not todo:
            return
        for turn_id in todo:
            try:
                await rt.executor.drive(turn_id)
            except Crash as crash:
                crashes.append(str(crash))
                clock.advance(60)  # the dead attempt's lease expires
    raise AssertionError("turns still runnable after 100 rounds")


def world(store: CrashingStore) -> tuple[Any, Any, FakeClock]:
    clock = FakeClock()
    rt, _, sink, seen = build(store=store, dispatcher=Shelf())
    rt.executor.clock = clock
    rt.executor.lease_seconds = 30.0
    return rt, seen, clock


async def outcome(text: str, store: CrashingStore) -> dict[str, Any]:
    rt, seen, clock = world(store)
    s = rt.session("boss", "b1")
    tid = await s.start(text, turn_id="p1")
    crashes: list[str] = []
    await drain(rt, store, clock, crashes)
    parent = await store.get_turn(tid)
    children = sorted(
        (t.record for t in store._turns.values() if t.record.parent == tid), key=lambda r: r.input.target["index"]
    )
    for c in children:
        assert_transcript_valid(store.transcript(c.session))
    assert_transcript_valid(store.transcript(s.ref))
    return {
        "status": parent.status,
        "text": parent.text,
        "usage": parent.usage,
        "children": [(c.turn_id, c.status, c.text, c.usage) for c in children],
        "transcript": [m.to_json() for m in store.transcript(s.ref)],
        "child_transcripts": [[m.to_json() for m in store.transcript(c.session)] for c in children],
        "model_calls": {name: m.calls for name, m in seen["models"].items()},
        "crashes": crashes,
    }


TEXT = "all a and b"


@pytest.fixture
async def baseline() -> dict[str, Any]:
    store = CrashingStore()
    got = await outcome(TEXT, store)
    assert got["status"] == TurnStatus.COMPLETED and len(got["children"]) == 2
    got["commits"] = store.commits
    return got


def comparable(got: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in got.items() if k not in ("crashes", "model_calls", "commits")}


async def test_the_uninterrupted_run_commits_in_a_known_number_of_units(baseline):
    # parent: open, model, park+spawn; each child: open, model+settle; parent: tool, model+settle
    assert baseline["commits"] == 3 + 2 * 2 + 2


@pytest.mark.parametrize("k", range(1, 10))
async def test_a_crash_after_any_commit_yields_one_child_each_and_the_same_result(k, baseline):
    store = CrashingStore(crash_after=k)
    got = await outcome(TEXT, store)
    assert got["crashes"] == [f"after commit {k}"]
    assert comparable(got) == comparable(baseline)
    # a committed step never runs again: the model was asked exactly as often as uninterrupted
    assert got["model_calls"] == baseline["model_calls"]


@pytest.mark.parametrize("k", range(1, 10))
async def test_a_crash_before_any_commit_yields_one_child_each_and_the_same_result(k, baseline):
    store = CrashingStore(crash_before=k)
    got = await outcome(TEXT, store)
    assert got["crashes"] == [f"before commit {k}"]
    assert comparable(got) == comparable(baseline)
    # the crashed unit's model step (if it was one) is asked again, nothing else
    extra = sum(got["model_calls"].values()) - sum(baseline["model_calls"].values())
    assert extra in (0, 1)


async def test_crashes_at_every_boundary_in_one_run_still_converge(baseline):
    """Every unit of the flow dies once right after committing (nine crashes in one run)."""

    class EveryTime(CrashingStore):
        async def atomic(self, turn_id, attempt_id, work, **kw):
            await InMemoryAtomic(self, turn_id, attempt_id, work)
            self.commits += 1
            raise Crash(f"after commit {self.commits}")

    store = EveryTime()
    got = await outcome(TEXT, store)
    assert len(got["crashes"]) == baseline["commits"]
    assert comparable(got) == comparable(baseline)


async def InMemoryAtomic(store: CrashingStore, turn_id: str, attempt_id: Any, work: Any) -> Any:
    return await InMemorySessionStore.atomic(store, turn_id, attempt_id, work)


async def test_no_child_is_spawned_for_a_parent_whose_park_did_not_commit():
    store = CrashingStore(crash_before=3)  # the park+spawn unit
    rt, seen, clock = world(store)
    await rt.session("boss", "b1").start(TEXT, turn_id="p1")
    with pytest.raises(Crash):
        await rt.executor.drive("p1")
    assert [t for t in store._turns.values() if t.record.parent] == []
    assert (await store.get_turn("p1")).status not in FINAL_STATUSES
