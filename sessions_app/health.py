"""Is this site ready to serve: the checks behind ``/readyz`` and ``manage.py june health``, and
the workers' heartbeats as they read (docs/operations.md "Health").

``readiness()`` runs four checks and reports each by name as ``ok`` or ``failed``, nothing else
(no host, no exception text: the endpoint is unauthenticated):

- ``database``: ``SELECT 1`` on the default database;
- ``queue``: django-q2's broker — with the ORM broker (ours, on either database) a read of its
  queue table on its database; with another broker, its ``ping``;
- ``migrations``: no migration left to apply (Django's migration plan; once empty it is not
  computed again in this process: a deploy migrates before it starts the new processes);
- ``channel_layer``: a message sent to a throwaway channel and received back.

The database checks run on one thread of their own that keeps its connection from probe to probe
(a probe every second costs two trivial queries, not a connection), and together they get
``JUNE_HEALTH_TIMEOUT`` seconds (default 2): a database that hangs fails the check in time.
Probes that arrive while the checks run share that run's result (a load balancer's probe among a
crowd of anonymous ones gets the same answer as the first, never a failure for being second);
once a run is older than the timeout it is stuck, and the next probes fail at once instead of
piling up behind it. The channel check gets the same time. Any exception is a ``failed`` check, logged here, never raised.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from sessions_app import models as m

log = logging.getLogger(__name__)

OK = "ok"
FAILED = "failed"
CHECKS = ("database", "queue", "migrations", "channel_layer")
#: a worker whose row was not written for this many beats is gone
BEATS_MISSED = 3


# -- the checks ----------------------------------------------------------------------------------

probe_thread = ThreadPoolExecutor(1, thread_name_prefix="june-health")
_in_flight: Future[dict[str, str]] | None = None
_in_flight_since = 0.0
_in_flight_lock = threading.Lock()
_migrated = False
_broker: Any = None


async def readiness() -> dict[str, Any]:
    """``{"status": "ok"|"failed", "checks": {name: "ok"|"failed"}, "workers": n}``; ``workers``
    (workers seen within ``BEATS_MISSED`` beats) is information only: a site with no worker
    running (a web-only deployment) is ready."""
    timeout = settings.JUNE_HEALTH_TIMEOUT
    on_thread = _submit(timeout)
    channel = asyncio.ensure_future(_channel_layer(timeout))
    checks: dict[str, str] = dict.fromkeys(("database", "queue", "migrations"), FAILED)
    workers = None
    if on_thread is not None:
        try:
            found = dict(await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(on_thread)), timeout))
            workers = found.pop("workers", None)
            checks.update(found)
        except TimeoutError:
            log.warning("readiness: the database checks took more than %.1f s", timeout)
        except Exception:
            log.warning("readiness: the database checks failed", exc_info=True)
    checks["channel_layer"] = await channel
    report: dict[str, Any] = {
        "status": OK if all(v == OK for v in checks.values()) else FAILED,
        "checks": {name: checks[name] for name in CHECKS},
    }
    if workers is not None:
        report["workers"] = workers
    return report


def _submit(timeout: float) -> Future[dict[str, Any]] | None:
    """The database checks on the health thread: the run in flight if one is (its result is
    shared, read-only), a new one if none is, None while a run older than ``timeout`` is stuck."""
    global _in_flight, _in_flight_since
    with _in_flight_lock:
        if _in_flight is not None and not _in_flight.done():
            if time.monotonic() - _in_flight_since > timeout:
                return None
            return _in_flight
        _in_flight, _in_flight_since = probe_thread.submit(_database_checks), time.monotonic()
        return _in_flight


def _database_checks() -> dict[str, Any]:
    """On the health thread (its connections are its own, kept between probes)."""
    found: dict[str, Any] = {}
    for name, check in (("database", _database), ("queue", _queue), ("migrations", _migrations)):
        found[name] = _run(name, check)
    if found["database"] == OK:
        try:
            found["workers"] = workers_alive()
        except Exception:
            log.warning("readiness: the workers' heartbeats could not be read", exc_info=True)
    return found


def _run(name: str, check: Any) -> str:
    """A check, tried again once on a fresh connection if it failed on one kept from before (the
    server may have ended it while idle: a restart of the database is not an outage)."""
    for attempt in (1, 2):
        try:
            return OK if check() else FAILED
        except Exception as exc:
            reused = any(c.connection is not None for c in connections.all(initialized_only=True))
            connections.close_all()
            if attempt == 2 or not reused:
                log.warning("readiness: %s failed (%s)", name, type(exc).__name__, exc_info=True)
                return FAILED
    return FAILED


def _database() -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone() == (1,)


def _queue() -> bool:
    global _broker
    broker = _broker = _broker or get_broker()
    if isinstance(broker, ORM):
        OrmQ.objects.using(Conf.ORM).filter(pk=0).exists()  # the queue's table answers
        return True
    return bool(broker.ping())


def _migrations() -> bool:
    global _migrated
    if not _migrated:
        executor = MigrationExecutor(connections["default"])
        _migrated = not executor.migration_plan(executor.loader.graph.leaf_nodes())
    return _migrated


async def _channel_layer(timeout: float) -> str:
    try:
        layer = get_channel_layer()
        if layer is None:
            return FAILED
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "health.ping"})
        message = await asyncio.wait_for(layer.receive(channel), timeout)
        return OK if message.get("type") == "health.ping" else FAILED
    except Exception as exc:  # a timeout among them
        log.warning("readiness: the channel layer failed (%s)", type(exc).__name__, exc_info=True)
        return FAILED


# -- the workers' heartbeats (written by sessions_app.workers.beat) --------------------------------


def stale_after() -> dt.timedelta:
    return dt.timedelta(seconds=BEATS_MISSED * settings.JUNE_WORKER_BEAT_SECONDS)


def workers_alive(*, now: dt.datetime | None = None) -> int:
    """How many workers beat within the last ``BEATS_MISSED`` beats (one small query)."""
    return m.WorkerBeat.objects.filter(seen_at__gte=(now or timezone.now()) - stale_after()).count()


def worker_rows(*, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Every worker's row, last seen first: id (``host:pid``), started, seen, ``age`` (seconds
    since seen), running, slots, and ``stale`` (not seen for ``BEATS_MISSED`` beats)."""
    now = now or timezone.now()
    late = stale_after()
    return [
        {
            "id": b.id,
            "started_at": b.started_at,
            "seen_at": b.seen_at,
            "age": max((now - b.seen_at).total_seconds(), 0.0),
            "running": b.running,
            "slots": b.slots,
            "stale": now - b.seen_at > late,
        }
        for b in m.WorkerBeat.objects.order_by("-seen_at", "id")[:200]
    ]
