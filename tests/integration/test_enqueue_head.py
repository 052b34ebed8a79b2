"""A turn is enqueued at its creation only when it can run now (``queue.enqueue_head``): one
queued behind another turn of its session gets its task from the chain's hand-off, never an
empty one at creation — and is never stranded: the hand-off, a cancel of the turn before it
and the sweeper (a lost enqueue) each give it its task. On SQLite the guard is read before the
enqueue; on PostgreSQL it is part of the NOTIFY broker's insert."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from sessions_app import models as m
from sessions_app import services, wiring
from sessions_app.workers import tasks
from sessions_app.workers.sweeper import pending_turn_ids, sweep_queued

pytestmark = pytest.mark.django_db(transaction=True)


def start(key: str, text: str = "steps:1") -> str:
    return services.turn_start(agent="faultagent", key=key, text=text, source="http").turn_id


def drive(turn_id: str) -> None:
    """``run_turn`` as a worker runs it, on a thread of its own (its own connections)."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            tasks.run_turn(turn_id)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    if errors:
        raise errors[0]


def take(turn_id: str) -> None:
    """A cluster takes the turn's task from the queue and runs it (its row acknowledged)."""
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    rows = [row.pk for row in OrmQ.objects.all() if SignedPackage.loads(row.payload)["args"][0] == turn_id]
    assert len(rows) == 1, f"{len(rows)} tasks for {turn_id}"
    OrmQ.objects.filter(pk__in=rows).delete()
    drive(turn_id)


def status(turn_id: str) -> str:
    return m.Turn.objects.get(pk=turn_id).status


def test_a_turn_behind_another_is_enqueued_once_by_the_hand_off_and_runs(fault_agent):
    a, b = start("chain"), start("chain")
    other = start("elsewhere")
    assert pending_turn_ids() == {a, other}  # b would only have claimed nothing
    take(a)
    assert status(a) == "completed"
    assert pending_turn_ids() == {other, b}  # a's last unit handed the chain to b
    take(b)
    assert status(b) == "completed"
    assert pending_turn_ids() == {other}


def test_a_turn_started_after_its_chain_ended_is_enqueued_at_once(fault_agent):
    a = start("later")
    take(a)
    b = start("later")
    assert b in pending_turn_ids()


def test_cancelling_the_turn_before_it_enqueues_the_next(fault_agent):
    a, b = start("cancelled"), start("cancelled")
    assert b not in pending_turn_ids()
    services.turn_cancel(turn_id=a)
    assert status(a) == "cancelled"
    assert b in pending_turn_ids()
    take(b)
    assert status(b) == "completed"


def test_a_lost_hand_off_is_recovered_by_the_sweeper(fault_agent, monkeypatch):
    """The worker settles the turn before and dies before its hand-off reaches the queue: the
    next turn, now first of its chain with no task waiting, is re-enqueued by ``sweep_queued``."""

    async def lost(runnable) -> None:
        return None

    a, b = start("lost"), start("lost")
    monkeypatch.setattr(wiring, "enqueue_runnable", lost)
    take(a)
    monkeypatch.undo()
    assert status(a) == "completed" and b not in pending_turn_ids()
    assert sweep_queued(requeue_after=0) == 1
    assert b in pending_turn_ids()
    take(b)
    assert status(b) == "completed"
