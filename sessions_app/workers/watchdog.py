"""The watchdog: a daemon thread in every worker process that runs the sweeper
(``workers.sweeper``) and rides it with the site's housekeeping: notifications
(``sessions_app.notify``), the sweep of uploads nobody sent, and the Message Batches poller
(``workers.batch_poller``).

It sleeps until the next of them is due: the sweep when the earliest lease it read runs out
(``sweeper.sweep``; with no turn running, a lease's length from now, the soonest any lease taken
meanwhile can run out), each pass of the housekeeping at its own period; never less than
``JUNE_SWEEP_SECONDS``. An idle worker's watchdog wakes once a lease, not once a second."""

from __future__ import annotations

import logging
import random
import threading
import time

from django.conf import settings
from django.db import connections

from sessions_app.attachment_services import attachments_sweep_unsent
from sessions_app.workers import batch_poller
from sessions_app.workers.sweeper import sweep

log = logging.getLogger(__name__)

_watchdog: threading.Thread | None = None


#: when the last pass ran (time.monotonic()); None: never. Not 0.0: the monotonic clock counts
#: from boot, so on a machine up for less than JUNE_NOTIFY_SECONDS the first pass was skipped
_notified_at: float | None = None


def _notify_pass() -> None:
    """Notifications ride the sweeper (``sessions_app.notify``): write park rows, fold a failure
    digest, send what is due. Off with JUNE_NOTIFY_ENABLED=0; never fails the sweeper."""
    global _notified_at
    if not getattr(settings, "JUNE_NOTIFY_ENABLED", True):
        return
    if _notified_at is not None and time.monotonic() - _notified_at < getattr(settings, "JUNE_NOTIFY_SECONDS", 15):
        return
    _notified_at = time.monotonic()
    try:
        from sessions_app.notify.sender import notify_tick

        counts = notify_tick()
        if any(counts.values()):
            log.info("notifications: %s", counts)
    except Exception:
        log.exception("notification pass failed")
        connections.close_all()


#: when the last sweep of unsent uploads ran (time.monotonic()); None: never
_unsent_swept_at: float | None = None
#: how often a worker's watchdog looks for uploads nobody sent (they are kept for hours: once in
#: ten minutes is plenty, and costs one indexed-by-age delete)
UNSENT_SWEEP_SECONDS = 600.0


def _unsent_pass() -> None:
    """Uploads never sent with a message go after ``JUNE_UNSENT_ATTACHMENT_HOURS``; never fails
    the sweeper."""
    global _unsent_swept_at
    if _unsent_swept_at is not None and time.monotonic() - _unsent_swept_at < UNSENT_SWEEP_SECONDS:
        return
    _unsent_swept_at = time.monotonic()
    try:
        if gone := attachments_sweep_unsent():
            log.info("sweeper: deleted %d unsent attachment(s)", gone)
    except Exception:
        log.exception("sweep of unsent attachments failed")
        connections.close_all()


def start_watchdog(period: float | None = None) -> threading.Thread | None:
    """Start (once per process) a daemon thread running ``sweep_expired`` when a lease may have run
    out, at most every ``period`` seconds, beginning with a pass at start (the recovery pass of a
    fresh cluster)."""
    global _watchdog
    period = settings.JUNE_SWEEP_SECONDS if period is None else period
    if period <= 0 or (_watchdog is not None and _watchdog.is_alive()):
        return _watchdog
    _watchdog = threading.Thread(target=_watch, args=(period,), name="june-sweeper", daemon=True)
    _watchdog.start()
    return _watchdog


def _watch(period: float) -> None:
    time.sleep(random.uniform(0, period / 2))  # spread the workers of a cluster apart
    while True:
        due = time.time() + period
        try:
            # the thread's connection is kept between passes (close_old_connections, with
            # CONN_MAX_AGE 0, reconnected every pass in every worker); a failed pass drops it
            counts, due = sweep()
            if any(counts.values()):
                log.info("sweeper: %s", counts)
        except Exception:  # a database blip: try again next period
            log.exception("sweeper pass failed")
            connections.close_all()
        _notify_pass()
        _unsent_pass()
        batch_poller.batch_pass()  # Message Batches: send, collect, resume (``workers.batch_poller``)
        time.sleep(pause(period, due))


def pause(period: float, due: float) -> float:
    """Seconds until the next pass: the sweep's ``due`` (wall clock) or the next housekeeping
    pass, whichever comes first; at least ``period`` (spread by a fifth either way, so a cluster's
    workers stay apart)."""
    waits = [due - time.time()]
    now = time.monotonic()
    if getattr(settings, "JUNE_NOTIFY_ENABLED", True) and _notified_at is not None:
        waits.append(_notified_at + getattr(settings, "JUNE_NOTIFY_SECONDS", 15) - now)
    if _unsent_swept_at is not None:
        waits.append(_unsent_swept_at + UNSENT_SWEEP_SECONDS - now)
    if (batched := batch_poller.next_pass()) is not None:
        waits.append(batched - now)
    return max(period * random.uniform(0.8, 1.2), min(waits))
