"""A queued turn whose task a cluster took and never claimed (the cluster was killed with the task
in its own queue, or is busy past the window) is re-enqueued by ``sweep_queued`` — at most once
per ``JUNE_REQUEUE_AFTER`` however many watchdogs race, never while a task of it waits in the
queue or was taken within the window, and without touching what fences a live attempt.

The task states are made by hand on the ORM queue: a lock in the future is a task a cluster took
at ``lock - retry`` (django-q2's claim), a lock in the past one that waits. The same with real
clusters and SIGKILL: ``tests/fault/test_requeue_taken.py``."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

from agents_app.runtime.seams import SessionRef, TurnInput
from sessions_app import models as m
from sessions_app import wiring
from sessions_app.outbox.queue import enqueue_turn
from sessions_app.workers import sweeper
from sessions_app.workers.sweeper import pending_turn_ids, queued_tasks, sweep_queued

pytestmark = pytest.mark.django_db(transaction=True)


def queued(key: str, n: int = 1, *, age: float = 60.0) -> list[str]:
    """``n`` queued turns of one session, created ``age`` seconds ago, with no task yet."""
    store = wiring.store()
    ids = [
        store.create_turn_sync(SessionRef("faultagent", key), TurnInput(text=f"t{i}"), turn_id=f"{key}-{i}").turn_id
        for i in range(n)
    ]
    m.Turn.objects.filter(pk__in=ids).update(created_at=timezone.now() - timedelta(seconds=age))
    return ids


def enqueue(turn_id: str) -> int:
    """A ``run_turn`` task for the turn, waiting in the queue; its row id."""
    before = set(OrmQ.objects.values_list("id", flat=True))
    with transaction.atomic():
        enqueue_turn(turn_id)
    (row,) = set(OrmQ.objects.values_list("id", flat=True)) - before
    return row


def take(row: int, ago: float) -> None:
    """A cluster took the task ``ago`` seconds ago (django-q2 locks it for ``retry`` when it does)."""
    OrmQ.objects.filter(pk=row).update(lock=timezone.now() + timedelta(seconds=Conf.RETRY - ago))


def tasks_of(turn_id: str) -> tuple[int, int]:
    """(waiting, taken) tasks of the turn in the queue."""
    now = timezone.now()
    locks = queued_tasks().get(turn_id, [])
    return sum(lock <= now for lock in locks), sum(lock > now for lock in locks)


def test_a_taken_task_never_claimed_is_requeued_once_per_window(fault_agent):
    """A turn whose task a killed cluster had taken stayed queued until the scheduled sweep
    (every minute, for turns older than a minute): 60-120 s, against the README's lease plus a
    second. Now the window after the take is enough, and one re-enqueue per window at most."""
    (turn,) = queued("taken")
    row = enqueue(turn)
    fence = m.Turn.objects.values("attempt_id", "revision", "attempts").get(pk=turn)
    take(row, ago=1)
    assert sweep_queued(requeue_after=3) == 0, "taken a second ago: its cluster is about to claim it"
    take(row, ago=5)
    assert sweep_queued(requeue_after=3) == 1
    assert tasks_of(turn) == (1, 1)
    after = m.Turn.objects.get(pk=turn)
    assert after.status == "queued" and after.lease_owner.startswith(sweeper.REQUEUED)
    # the mark is only the lease columns, which a queued turn does not use: nothing that fences
    # an attempt moved, and the claim takes the turn as before
    assert {"attempt_id": after.attempt_id, "revision": after.revision, "attempts": after.attempts} == fence
    assert sweep_queued(requeue_after=3) == 0, "its new task waits: a cluster will take it"
    # that task is taken too and not claimed: a second re-enqueue, but only a window after the first
    (new,) = set(OrmQ.objects.values_list("id", flat=True)) - {row}
    take(new, ago=10)
    now = time.time()
    assert sweep_queued(requeue_after=3, now=now + 1) == 0, "re-enqueued within the window"
    assert sweep_queued(requeue_after=3, now=now + 3.5) == 1
    store = wiring.store()
    assert store.claim_sync(turn, owner="w:1", attempt_id="a1", now=time.time(), lease_seconds=10)
    assert m.Turn.objects.get(pk=turn).lease_owner == "w:1"
    assert sweep_queued(requeue_after=3, now=now + 100) == 0, "claimed: not queued any more"


def test_only_the_head_of_a_chain_is_requeued(fault_agent):
    first, second = queued("chain", 2)
    for turn in (first, second):
        take(enqueue(turn), ago=30)
    assert sweep_queued(requeue_after=3) == 1
    assert tasks_of(first) == (1, 1) and tasks_of(second) == (0, 1)


def test_a_waiting_task_or_a_young_turn_is_left_alone(fault_agent):
    (waiting,) = queued("waiting")
    enqueue(waiting)
    (young,) = queued("young", age=1)
    take(enqueue(young), ago=1)
    seen: set[str] = set()
    for _ in range(3):
        assert sweep_queued(requeue_after=3) == 0
        assert sweep_queued(requeue_after=3, lost_seen=seen) == 0
    assert pending_turn_ids() == {waiting}


def test_a_lost_enqueue_is_requeued_at_the_watchdogs_second_look(fault_agent):
    """A turn with no task at all may be one whose enqueue is on its way (a hand-off commits the
    turn queued, then inserts its task): the watchdog re-enqueues it only when its previous pass
    saw it without a task too; the schedule (no memory, once a minute) at once."""
    lost, arriving = queued("lost", 1) + queued("arriving", 1)
    seen: set[str] = set()
    assert sweep_queued(requeue_after=3, lost_seen=seen) == 0
    assert seen == {lost, arriving}
    enqueue(arriving)  # its enqueue landed between the two passes
    assert sweep_queued(requeue_after=3, lost_seen=seen) == 1
    assert tasks_of(lost) == (1, 0) and tasks_of(arriving) == (1, 0)
    assert sweep_queued(requeue_after=3, lost_seen=seen) == 0 and seen == set()
    m.Turn.objects.filter(pk=lost).update(lease_owner=None, lease_expires_at=None)
    OrmQ.objects.all().delete()
    assert sweep_queued(requeue_after=3) == 2


def test_a_spent_budget_fails_the_queued_turn_instead(fault_agent):
    from django.conf import settings

    (turn,) = queued("spent")
    take(enqueue(turn), ago=30)
    m.Turn.objects.filter(pk=turn).update(attempts=settings.JUNE_MAX_ATTEMPTS)
    assert sweep_queued(requeue_after=3) == 0
    assert m.Turn.objects.get(pk=turn).status == "failed"


def test_racing_watchdogs_requeue_a_turn_once(fault_agent, monkeypatch):
    """Every worker process of every cluster runs a watchdog: all of them may find the same
    turn unclaimed in the same second. The compare-and-set on the turn row lets one re-enqueue it.
    Each racer is held at the compare-and-set until all have decided to re-enqueue."""
    racers = 6
    (turn,) = queued("race")
    take(enqueue(turn), ago=30)
    gate = threading.Barrier(racers, timeout=30)
    real = sweeper.requeue_once

    def held(turn_id: str, **kwargs) -> bool:
        gate.wait()
        return real(turn_id, **kwargs)

    monkeypatch.setattr(sweeper, "requeue_once", held)
    counts: list[int] = []
    errors: list[BaseException] = []

    def watchdog(i: int) -> None:
        try:
            # half as the watchdog calls it (its memory of lost turns), half as the schedule does
            counts.append(sweep_queued(requeue_after=3, lost_seen=set() if i % 2 else None))
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=watchdog, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert sorted(counts) == [0] * (racers - 1) + [1]
    assert tasks_of(turn) == (1, 1), "one new task, beside the one the dead cluster took"
