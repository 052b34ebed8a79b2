"""The benches' readings of the event log, on turns the store really wrote: a reading that
breaks when the storage changes shows here, not in the next bench run (0014 left an event
that refers to a message without a ``created_at`` of its own; the worker benches read that
column and failed on its None for two sessions)."""

from __future__ import annotations

import asyncio
import importlib
import os
from unittest import mock

import pytest

from sessions_app import models as m

pytestmark = pytest.mark.django_db(transaction=True)


def bench(name: str):
    """A bench module, imported as its script would be: its import points DATABASE_URL and
    JUNE_VAR_DIR at a bench database, which this process (and what it starts) must not keep."""
    with mock.patch.dict(os.environ):
        return importlib.import_module(f"bench.{name}")


def _short_turns(n: int) -> list[str]:
    """``n`` of bench_short's turns (model -> sync tool -> model) in one session, their ids."""
    from sessions_app.store import DjangoSessionStore, direct

    short = bench("bench_short")
    store, agent, one_turn = DjangoSessionStore(), short.make_agent(), short.one_turn

    async def turns() -> None:
        for i in range(n):
            await one_turn(store, agent, "reads", i)

    try:
        asyncio.run(turns())
    finally:
        direct.close_all()
    return list(m.Turn.objects.filter(session__key="reads").order_by("created_at").values_list("id", flat=True))


def test_the_workload_check_times_every_turn_from_the_event_log():
    from bench.workload import check

    ids = _short_turns(3)
    assert len(ids) == 3
    started = m.Event.objects.filter(turn_id__in=ids, type="turn.started")
    assert started.count() == 3
    batch = check(ids)
    assert batch.turns == 3 and batch.attempts_over_one == 0
    assert len(batch.service_ms) == 3 and all(ms >= 0 for ms in batch.service_ms)
    assert batch.started <= batch.completed
    # the checkpoints of a 3-step turn, by their commit times: at least one gap per turn
    assert len(batch.step_ms) >= 3 and all(ms >= 0 for ms in batch.step_ms)


def test_the_worker_benches_read_a_time_for_every_turn_started_and_completed():
    at, event_time = bench("bench_subagents").at, bench("bench_workers").event_time
    ids = _short_turns(2)
    for turn_id in ids:
        created = m.Turn.objects.get(pk=turn_id).created_at
        for type_ in ("turn.started", "turn.completed"):
            assert event_time(turn_id, type_) is not None, type_
            assert at(turn_id, type_, last=True) >= created
        assert event_time(turn_id, "turn.completed") >= event_time(turn_id, "turn.started")


def test_check_refuses_a_turn_that_did_not_complete_once():
    from bench.workload import check

    ids = _short_turns(1)
    m.Turn.objects.filter(pk=ids[0]).update(status="failed")
    with pytest.raises(SystemExit, match="not completed exactly once"):
        check(ids)
