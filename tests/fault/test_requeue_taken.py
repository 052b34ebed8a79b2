"""A queued turn whose task a cluster took but never ran, on real qclusters.

A cluster takes a task before a worker of its own is free to run it (django-q2's pusher locks the
row for ``retry`` and puts it in the cluster's queue). SIGKILLed then, the cluster left the row
locked for half an hour and the turn queued with no lease, which the lease watchdog never looks
at: the turn waited for the scheduled sweep (every minute, for turns older than
``JUNE_REQUEUE_AFTER``, then 60 s), 60-120 s. Four tests of ``test_subagents_kill.py`` took
62-68 s each for it (three of them always, the fourth when one cluster's pusher took both of
its children). Here the scheduled sweep is pushed out of reach, so only the watchdogs can give
the turn its new task.

Both tests fill the first cluster: its only worker's runner drives one turn at most
(``JUNE_TURNS_PER_WORKER=1``), held on an async tool (``charge:during``), so that the worker
waits in its next task for a slot, and the next three turns' tasks are taken and held: one in
that worker's hand, one in the cluster's queue (``queue_limit`` 1), one in its pusher's hand.
Full so, the cluster takes no new task, and the tests count the re-enqueues in the clusters'
logs: one per turn.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest

from .qcluster import wait_for
from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)

#: the lease is 2 s in these tests and JUNE_REQUEUE_AFTER defaults to it; the bound leaves room
#: for a loaded machine to start a cluster, far below the scheduled sweep's 60-120 s
BOUND = 20.0
WINDOW = 2.0


def no_scheduled_sweep() -> None:
    """The scheduled sweep (django-q2 schedule) waits an hour: only a watchdog can act."""
    from django.utils import timezone
    from django_q.models import Schedule

    from sessions_app.outbox.queue import SWEEP_SCHEDULE

    assert Schedule.objects.filter(name=SWEEP_SCHEDULE).update(next_run=timezone.now() + timedelta(hours=1)) == 1


def busy_with_taken_turns(clusters, fault_agent) -> tuple:
    """A cluster whose only worker's runner is full with a turn (``busy``), and three more turns
    whose tasks that cluster has taken (``taken``: its worker's hand, its queue, its pusher's)."""
    from django.utils import timezone

    from sessions_app.workers.sweeper import queued_tasks

    no_scheduled_sweep()
    for cluster in clusters.started:
        if cluster.alive():
            cluster.kill()
    first = clusters.start(JUNE_TURNS_PER_WORKER="1")
    n = len(clusters.started)
    clusters.arm("charge:during")
    busy = start_turn(fault_agent, f"busy-{n}", text="charge")
    clusters.reached("charge:during")
    taken = [start_turn(fault_agent, f"taken-{n}-{i}") for i in range(3)]

    def held() -> bool:
        tasks, now = queued_tasks(), timezone.now()
        return all(any(lock > now for lock in tasks.get(turn_id, [])) for turn_id in taken)

    wait_for(held, timeout=30, what="the busy cluster to take the three turns' tasks")
    return first, busy, taken


def requeues(clusters, turn_id: str) -> int:
    pattern = re.compile(rf"queued turn {turn_id} .*re-enqueued")
    # the log files, not ``output()``: a killed cluster's handle is closed
    return sum(len(pattern.findall(cluster.log_path.read_text(errors="replace"))) for cluster in clusters.started)


def assert_requeued_once_per_window(clusters, turn_ids: list[str], waited: float) -> None:
    """Each turn was re-enqueued, and at most once per window it waited: a cluster that takes the
    new task but holds it past the window (its worker still starting, on a loaded machine: CI once
    saw [1, 1, 2] after 7 s) has it re-enqueued in the next window, by design."""
    counts = [requeues(clusters, turn_id) for turn_id in turn_ids]
    assert all(1 <= n <= 1 + int(waited // WINDOW) for n in counts), (counts, waited)


def assert_ran_once(turn_ids: list[str]) -> None:
    from agents_app.models import Order
    from sessions_app.models import Event, Turn

    for turn_id in turn_ids:
        turn = Turn.objects.get(pk=turn_id)
        assert turn.status == "completed" and turn.attempts == 1, "claimed once, by the new task"
        assert Event.objects.filter(turn_id=turn_id, type="turn.completed").count() == 1
        assert Order.objects.filter(turn_id=turn_id).count() == 1


def queued(turn_ids: list[str]) -> bool:
    from sessions_app.models import Turn

    return Turn.objects.filter(pk__in=turn_ids, status="queued").exists()


def test_turns_taken_by_a_killed_cluster_start_elsewhere_within_the_window(clusters, fault_agent):
    """Pins the 60-120 s wait: the cluster holding the turns' tasks is SIGKILLed, and they must
    start on another within the bound (the window, then a watchdog pass), each re-enqueued once
    though two watchdogs (two worker processes) race for them."""
    first, busy, taken = busy_with_taken_turns(clusters, fault_agent)
    first.kill()
    killed = time.monotonic()
    clusters.disarm("charge:during")
    clusters.start(JUNE_Q_WORKERS="2")
    wait_for(lambda: not queued(taken), timeout=BOUND, what="the taken turns to be claimed by the new cluster")
    started = time.monotonic() - killed
    assert all(wait_final(turn_id) == "completed" for turn_id in [busy, *taken])
    print(f"\nthe taken turns started within {started:.1f} s of their cluster's SIGKILL")
    assert_ran_once(taken)
    assert_requeued_once_per_window(clusters, taken, started)


def test_a_busy_clusters_taken_turns_run_on_a_free_cluster(clusters, fault_agent):
    """A live cluster busy past the window with turns' tasks taken: the watchdog gives each turn a
    new task, a free cluster runs them, and the busy cluster's tasks, run at last, claim nothing.
    The duplicate is one task per turn and window, and it runs no step."""
    from sessions_app.models import Turn
    from sessions_app.workers.sweeper import queued_tasks

    first, busy, taken = busy_with_taken_turns(clusters, fault_agent)
    began = time.monotonic()
    clusters.start()  # free: it takes the new tasks as soon as there are some
    wait_for(
        lambda: set(Turn.objects.filter(pk__in=taken).values_list("status", flat=True)) == {"completed"},
        timeout=BOUND,
        what="the taken turns to complete on the free cluster",
    )
    completed = time.monotonic() - began
    print(f"\nthe taken turns completed {completed:.1f} s after a free cluster started")
    assert Turn.objects.get(pk=busy).status == "running", "the busy turn was held all along"
    clusters.disarm("charge:during")
    assert wait_final(busy) == "completed"
    # the busy cluster's worker runs the tasks it had taken: their claims find the turns done
    wait_for(lambda: not set(taken) & set(queued_tasks()), timeout=30, what="the busy cluster's tasks to finish")
    assert first.alive()
    assert_ran_once(taken)
    assert_requeued_once_per_window(clusters, taken, completed)
