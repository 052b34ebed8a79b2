"""A queued turn is taken by a runner only when it can run now, first of its session's chain
(``workers.taker``, the claim's own condition): one queued behind another turn of its session
waits in its row for the chain's hand-off — and is never stranded: the hand-off, a cancel of the
turn before it, and a hand-off lost with its worker each leave it first of its chain, where any
runner's next look takes it. No django-q2 task is queued for any of them."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from sessions_app import models as m
from sessions_app import services, wiring
from sessions_app.workers import tasks
from sessions_app.workers.taker import take as take_rows

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


def takeable() -> set[str]:
    """What a runner would take now (its marks undone, so the next look sees the same)."""
    ids = take_rows("host:1", 100)
    m.Turn.objects.filter(pk__in=ids).update(lease_owner=None, lease_expires_at=None)
    return set(ids)


def take(turn_id: str) -> None:
    """A runner takes the turn from the table and drives it."""
    from django_q.models import OrmQ

    assert turn_id in takeable() and not OrmQ.objects.exists()
    drive(turn_id)


def status(turn_id: str) -> str:
    return m.Turn.objects.get(pk=turn_id).status


def test_a_turn_behind_another_is_enqueued_once_by_the_hand_off_and_runs(fault_agent):
    a, b = start("chain"), start("chain")
    other = start("elsewhere")
    assert takeable() == {a, other}  # b waits for its chain
    take(a)
    assert status(a) == "completed"
    assert takeable() == {other, b}  # a's last unit handed the chain to b
    take(b)
    assert status(b) == "completed"
    assert takeable() == {other}


def test_a_turn_started_after_its_chain_ended_is_enqueued_at_once(fault_agent):
    a = start("later")
    take(a)
    b = start("later")
    assert b in takeable()


def test_cancelling_the_turn_before_it_enqueues_the_next(fault_agent):
    a, b = start("cancelled"), start("cancelled")
    assert b not in takeable()
    services.turn_cancel(turn_id=a)
    assert status(a) == "cancelled"
    assert b in takeable()
    take(b)
    assert status(b) == "completed"


def test_a_lost_hand_off_leaves_the_next_turn_takeable(fault_agent, monkeypatch):
    """The worker settles the turn before and dies before its hand-off reaches anyone: the next
    turn, first of its chain now, is taken by its row at any runner's next look (the sweeper's
    re-enqueue of a lost task is no longer needed)."""

    async def lost(runnable) -> None:
        return None

    a, b = start("lost"), start("lost")
    monkeypatch.setattr(wiring, "enqueue_runnable", lost)
    take(a)
    monkeypatch.undo()
    assert status(a) == "completed" and b in takeable()
    take(b)
    assert status(b) == "completed"
