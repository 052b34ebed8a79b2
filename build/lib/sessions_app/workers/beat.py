"""A worker process's *worker beat*, its ``WorkerBeat`` row: the process is alive (not to be
confused with an attempt's heartbeat, which renews a turn's lease).

Each worker process's runner (``sessions_app.workers.runner``) writes its row every
``JUNE_WORKER_BEAT_SECONDS`` (default 5) from its event loop: the loop schedules the write, a
thread of its own does it (one Django connection), so the loop never waits on the database and a
slow write delays no turn. A beat is written only while the previous one is done (a database that
hangs leaves one write in flight, not a pile). Because the loop schedules it, a loop held by a
turn's computing stops the beats too: a stale row is a worker that cannot run its turns, whether
it is dead, frozen or busy.

The row goes when the worker stops cleanly: its runner's end (a retired worker) deletes it, and
``june_worker``'s stop deletes the rows of the processes it stopped (their leases are released
there too). A SIGKILLed cluster leaves its rows: they turn stale after ``health.BEATS_MISSED`` beats,
and rows a day old are pruned when a runner starts.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connections
from django.utils import timezone

from sessions_app import models as m

log = logging.getLogger(__name__)

#: rows older than this are deleted when a runner starts (clusters SIGKILLed long ago)
PRUNE_AFTER = dt.timedelta(days=1)


def worker_id(pid: int | None = None) -> str:
    """``host:pid``, as a lease's owner and ``shutdown.release_leases`` name a worker."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


class Heart:
    """One worker process's beats, written on a thread of their own."""

    def __init__(self, *, slots: int) -> None:
        self.id = worker_id()
        self.slots = slots
        self.started_at = timezone.now()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="june-beat")
        self._last: Future[None] | None = None
        self.beats = 0

    def beat(self, running: int) -> bool:
        """Schedule a write of the row (never waits); False when the previous one is not done."""
        if self._last is not None and not self._last.done():
            return False
        self._last = self._writer.submit(self._write, running, self.beats == 0)
        self.beats += 1
        return True

    def stop(self) -> None:
        """Delete the row (after the write in flight, for 10 s at most; a database that hangs
        leaves the row to go stale); closes the thread's connection."""
        try:
            self._writer.submit(self._forget).result(timeout=10)
        except Exception:
            log.warning("worker %s: heartbeat not deleted", self.id, exc_info=True)
        self._writer.shutdown(wait=False)

    def _write(self, running: int, first: bool) -> None:
        now = timezone.now()
        try:
            if first:
                m.WorkerBeat.objects.filter(seen_at__lt=now - PRUNE_AFTER).delete()
            row = {"seen_at": now, "running": running, "slots": self.slots}
            if not m.WorkerBeat.objects.filter(pk=self.id).update(**row):
                m.WorkerBeat.objects.create(id=self.id, started_at=self.started_at, **row)
        except Exception:  # the database is away: the next beat tries again
            log.warning("worker %s: heartbeat not written", self.id, exc_info=True)
            connections.close_all()

    def _forget(self) -> None:
        try:
            forget_workers([os.getpid()])
        finally:
            connections.close_all()


def forget_workers(pids: list[int]) -> int:
    """Delete the rows of this host's worker processes ``pids`` (stopped). Returns how many."""
    if not pids:
        return 0
    try:
        return m.WorkerBeat.objects.filter(pk__in=[worker_id(pid) for pid in pids]).delete()[0]
    except Exception:  # the database is away: the rows turn stale by themselves
        log.warning("could not delete the heartbeats of %s", pids, exc_info=True)
        return 0
