"""django-q2 entry points: thin, load by id.

A queued turn is no django-q2 task: a worker process's runner takes it from the turn table
(``sessions_app.workers.taker``; the runner is started at q2's ``post_spawn``:
``serve_turns_concurrently``). ``run_turn`` stays for a task queued before turns were delivered
by their rows (and for tests, the CLI, a thread of its own): in a worker process it hands the
turn to the process's runner and returns once the turn is on its loop; anywhere else it drives
the turn to its end in a fresh ``asyncio.run``. The unit that settles a turn for good hands the
session's chain to its next queued turn (``Commit.runnable``, the executor's ``on_runnable``).
``sweep_expired_leases`` is the scheduled sweeper (see ``sessions_app.workers.sweeper`` and
docs/workers.md). Their dotted names are in ``sessions_app.outbox.queue``.
"""

from __future__ import annotations

import asyncio
import logging
import os

from django.conf import settings
from django_q.models import Schedule

from agents_app.runtime.seams import TurnStatus
from sessions_app import retention, wiring
from sessions_app.outbox.doorbell import cancel_listener
from sessions_app.outbox.queue import SWEEP, SWEEP_SCHEDULE
from sessions_app.workers import runner
from sessions_app.workers.sweeper import sweep_expired

log = logging.getLogger(__name__)

#: the pid of the django-q2 worker process this is (``serve_turns_concurrently``); a fork's
#: child is another process
_worker_pid: int | None = None


def serve_turns_concurrently(**_: object) -> None:
    """This process is a django-q2 worker (connected to q2's ``post_spawn``): its runner starts
    now, taking queued turns from the turn table, and its heartbeat shows the worker."""
    global _worker_pid
    _worker_pid = os.getpid()
    runner.runner(take=True)


def run_turn(turn_id: str) -> str | None:
    if _worker_pid == os.getpid():
        return runner.runner().submit(turn_id)
    return asyncio.run(_drive(turn_id))


async def _drive(turn_id: str) -> str | None:
    executor = wiring.executor()
    store = executor.store
    executor.on_signals = cancel_listener
    try:
        status = await executor.drive(turn_id)
        if status == TurnStatus.RUNNING:
            # the loop returns RUNNING only when its attempt lost the lease (fenced out)
            log.warning("turn %s: attempt of %s lost its lease; its last unit was refused", turn_id, executor.owner)
    except BaseException:
        await store.close_connections()  # it may be the connection that failed
        raise
    finally:
        await executor.sink.close()  # the sink sends in the background: drain it
    return str(status) if status else None


def sweep_expired_leases() -> dict[str, int]:
    """The scheduled sweeper: expired leases (re-deliver, or fail on a spent budget)."""
    return sweep_expired()


#: the privacy sweep's django-q2 schedule (retention, the audit log's own: docs/privacy.md)
PRIVACY_SWEEP = "sessions_app.workers.tasks.privacy_sweep"
PRIVACY_SCHEDULE = "june.privacy_sweep"


def privacy_sweep() -> dict:
    """The scheduled privacy sweep: one pass of retention and the audit log's retention."""
    return retention.retention_sweep()


def ensure_privacy_schedule(**_: object) -> None:
    """Create (or correct) the privacy sweep's schedule, every ``JUNE_RETENTION_MINUTES``."""
    minutes = max(int(settings.JUNE_RETENTION_MINUTES), 1)
    schedule, created = Schedule.objects.get_or_create(
        name=PRIVACY_SCHEDULE,
        defaults={"func": PRIVACY_SWEEP, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1},
    )
    if not created and (schedule.func != PRIVACY_SWEEP or schedule.minutes != minutes or schedule.repeats == 0):
        Schedule.objects.filter(pk=schedule.pk).update(
            func=PRIVACY_SWEEP, schedule_type=Schedule.MINUTES, minutes=minutes, repeats=-1
        )


def ensure_sweeper_schedule(**_: object) -> None:
    """Create (or correct) the django-q2 schedule that runs the sweeper; idempotent. Connected to
    ``post_migrate`` so ``manage.py migrate`` sets it up; editable in the admin afterwards
    (only func and the interval are enforced)."""
    minutes = max(int(settings.JUNE_SWEEP_MINUTES), 1)
    schedule, created = Schedule.objects.get_or_create(
        name=SWEEP_SCHEDULE,
        defaults={"func": SWEEP, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1},
    )
    if not created and (schedule.func != SWEEP or schedule.minutes != minutes or schedule.repeats == 0):
        Schedule.objects.filter(pk=schedule.pk).update(
            func=SWEEP, schedule_type=Schedule.MINUTES, minutes=minutes, repeats=-1
        )
