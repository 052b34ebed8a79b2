"""django-q2 entry points: thin, load by id.

``run_turn`` drives one turn (claim, heartbeat, the loop, a live cancel listener); the unit that
settles it for good hands the session's chain to its next queued turn (``Commit.runnable``, which
the executor's ``on_runnable`` enqueues; the sweeper backs a lost enqueue up). ``sweep_expired_leases`` is the scheduled sweeper
(see ``sessions_app.workers.sweeper`` and docs/workers.md). Their dotted names are in
``sessions_app.outbox.queue``.

A worker process runs its tasks on one event loop, kept from task to task (``keep_event_loop``,
at q2's ``post_spawn``): a loop per task cost its creation and teardown, and dropped what lives
on the loop with it — the channel layer's connections (channels_redis keeps a pool per loop, so
every task connected to Redis again). Each task still ends as ``asyncio.run`` ends one: what it
left running is cancelled and awaited, so nothing of a turn outlives its task. Anywhere else
(tests, a thread of its own) ``run_turn`` runs in a fresh ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import threading
from typing import Any, Coroutine, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django_q.models import Schedule
from psycopg import pq
from psycopg.pq import TransactionStatus

from agents_app.runtime.seams import TurnStatus
from sessions_app import wiring
from sessions_app.outbox.doorbell import cancel_listener
from sessions_app.outbox.queue import SWEEP, SWEEP_SCHEDULE
from sessions_app.store import direct
from sessions_app.workers.sweeper import pending_turn_ids, sweep_expired, sweep_queued  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)
T = TypeVar("T")

#: seconds a finished task's leftovers (a cancelled listener, say) get to end before the loop is dropped
LEFTOVER_SECONDS = 5.0


def run_turn(turn_id: str) -> str | None:
    async def drive() -> str | None:
        executor = wiring.executor()
        store = executor.store
        # the store's connections outlive this task (a connect costs more than a short turn's
        # first step): keep them for the next task unless they are broken
        if not await _connections_quiet():
            await store.drop_broken_connections()
        executor.on_signals = cancel_listener
        try:
            status = await executor.drive(turn_id)
            if status == TurnStatus.RUNNING:
                # the loop returns RUNNING only when its attempt lost the lease (fenced out)
                log.warning("turn %s: attempt of %s lost its lease; its last unit was refused",
                            turn_id, executor.owner)
        except BaseException:
            await store.close_connections()  # it may be the connection that failed
            raise
        finally:
            await executor.sink.close()  # the sink sends in the background: drain it
        return str(status) if status else None

    return _run(drive())


# -- the store's connections between tasks -------------------------------------------------------

async def _connections_quiet() -> bool:
    """Whether the store's PostgreSQL connections — Django's, on asgiref's sync thread, and the
    store's own on this thread (``direct``) — are idle with nothing to read: then nothing has
    broken them since their last statement, and the store's check (a ``SELECT 1`` on each and a
    thread hop, every task) is skipped. A server that ends a connection (a restart, a
    terminated backend) first sends its error and closes the socket, which makes the socket
    readable; so does anything else the server says unasked — every such case, a connection
    in a transaction or with errors, and any other database, takes the full check."""
    if connections["default"].vendor != "postgresql":
        return False
    if getattr(_kept, "django_pid", None) != os.getpid():
        # Django's connections are per thread: the sync thread's wrapper, read here between tasks
        # (no unit runs on it now); kept for the process (a fork starts again)
        _kept.django = await sync_to_async(lambda: connections["default"])()
        _kept.django_pid = os.getpid()
    django = _kept.django
    if django.errors_occurred or django.in_atomic_block:
        return False
    return _quiet(django.connection) and _quiet(direct.connection())


def _quiet(conn: Any) -> bool:
    """A psycopg connection (or None: nothing to check) idle, unbroken and with nothing to read."""
    if conn is None or conn.closed:
        return True
    if (conn.broken or conn.info.transaction_status != TransactionStatus.IDLE
            or conn.pgconn.pipeline_status != pq.PipelineStatus.OFF):  # results left to read (``wire.drain``)
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


# -- the worker's event loop ----------------------------------------------------------------------

_kept = threading.local()


def keep_event_loop(**_: object) -> None:
    """This process's main thread runs its tasks on one event loop (connected to q2's
    ``post_spawn``: a worker process, after its fork)."""
    _kept.pid = os.getpid()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    if getattr(_kept, "pid", None) != os.getpid():
        return asyncio.run(coro)
    loop = getattr(_kept, "loop", None)
    if loop is None or loop.is_closed():
        loop = _kept.loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        _end_task(loop)


def _end_task(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and await what the task left running, as ``asyncio.run`` does at its end. Should a
    leftover ignore its cancel for ``LEFTOVER_SECONDS``, the loop is closed and the next task
    gets a new one."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    done, pending = loop.run_until_complete(asyncio.wait(left, timeout=LEFTOVER_SECONDS))
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("a task left by run_turn failed: %r", task.exception())
    if pending:
        log.warning("%d task(s) left by run_turn ignored their cancel; the event loop is replaced", len(pending))
        loop.close()
        _kept.loop = None


def sweep_expired_leases() -> dict[str, int]:
    """The scheduled sweeper: expired leases (re-enqueue or fail on a spent budget) and queued
    turns whose task was lost."""
    counts = sweep_expired()
    counts["requeued"] = sweep_queued()
    return counts


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
        Schedule.objects.filter(pk=schedule.pk).update(func=SWEEP, schedule_type=Schedule.MINUTES,
                                                       minutes=minutes, repeats=-1)
