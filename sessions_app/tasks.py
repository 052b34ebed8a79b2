"""django-q2 entry points: thin, load by id.

``run_turn`` drives one turn (claim, heartbeat, the loop, a live cancel listener) and then hands
the session's chain to its next queued turn. ``sweep_expired_leases`` is the scheduled sweeper
(see ``sessions_app.worker`` and docs/workers.md).
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.utils import timezone
from django_q.tasks import async_task

from agents_app.runtime.seams import SessionRef, TurnStatus

log = logging.getLogger(__name__)

RUN_TURN = "sessions_app.tasks.run_turn"
SWEEP = "sessions_app.tasks.sweep_expired_leases"
SWEEP_SCHEDULE = "june.sweep_expired_leases"


def enqueue_turn(turn_id: str) -> None:
    """Enqueue after the surrounding transaction commits: a worker never sees an uncommitted turn."""
    transaction.on_commit(lambda: async_task(RUN_TURN, turn_id, task_name=f"turn {turn_id}", group="june.turns"))


class Q2Dispatcher:
    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        await sync_to_async(enqueue_turn)(turn_id)


def run_turn(turn_id: str) -> str | None:
    from . import direct, engine
    from .worker import cancel_listener

    async def drive() -> str | None:
        # the store runs on asgiref's one sync thread, which outlives this task: keep its
        # connection for the next task (a connect costs more than a short turn's first step)
        # unless it is broken
        await sync_to_async(_drop_unusable_connections)()
        direct.drop_unusable()  # the store's own connection, on this (the loop's) thread
        executor = engine.executor()
        executor.on_signals = cancel_listener
        try:
            status = await executor.drive(turn_id)
            if status == TurnStatus.RUNNING:
                # the loop returns RUNNING only when its attempt lost the lease (fenced out)
                log.warning("turn %s: attempt of %s lost its lease; its last unit was refused",
                            turn_id, executor.owner)
            elif status is not None:
                rec = await executor.store.get_turn(turn_id)
                nxt = await executor.store.next_queued(rec.session)
                if nxt:
                    await sync_to_async(enqueue_turn)(nxt)
        except BaseException:
            await sync_to_async(connections.close_all)()  # it may be the connection that failed
            direct.close_all()
            raise
        finally:
            await executor.sink.close()  # the sink sends in the background: drain it
        return str(status) if status else None

    return asyncio.run(drive())


def _drop_unusable_connections() -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and (conn.errors_occurred or not conn.is_usable()):
            conn.close()


def sweep_expired_leases() -> dict[str, int]:
    """The scheduled sweeper: expired leases (re-enqueue or fail on a spent budget) and queued
    turns whose task was lost."""
    from .worker import sweep_expired, sweep_queued

    counts = sweep_expired()
    counts["requeued"] = sweep_queued()
    return counts


def pending_turn_ids() -> set[str]:
    """Turn ids with a ``run_turn`` task waiting in the ORM queue (not yet taken by a cluster)."""
    from django_q.conf import Conf
    from django_q.models import OrmQ
    from django_q.signing import BadSignature, SignedPackage

    ids: set[str] = set()
    for payload in OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lte=timezone.now()).values_list("payload", flat=True):
        try:
            task = SignedPackage.loads(payload)
        except (BadSignature, TypeError, ValueError):
            continue
        if task.get("func") == RUN_TURN and task.get("args"):
            ids.add(str(task["args"][0]))
    return ids


def ensure_sweeper_schedule(**_: object) -> None:
    """Create (or correct) the django-q2 schedule that runs the sweeper; idempotent. Connected to
    ``post_migrate`` so ``manage.py migrate`` sets it up; editable in the admin afterwards
    (only func and the interval are enforced)."""
    from django.conf import settings
    from django_q.models import Schedule

    minutes = max(int(settings.JUNE_SWEEP_MINUTES), 1)
    schedule, created = Schedule.objects.get_or_create(
        name=SWEEP_SCHEDULE,
        defaults={"func": SWEEP, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1},
    )
    if not created and (schedule.func != SWEEP or schedule.minutes != minutes or schedule.repeats == 0):
        Schedule.objects.filter(pk=schedule.pk).update(func=SWEEP, schedule_type=Schedule.MINUTES,
                                                       minutes=minutes, repeats=-1)
