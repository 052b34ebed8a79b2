"""Stopping a worker cluster within seconds, however the stop signal is delivered.

django-q2's ``qcluster`` (1.11) stops gracefully only when SIGTERM or SIGINT reaches its main
process alone. Its sentinel and the processes under it (pusher, monitor, workers) keep
SIGTERM at its default action, so a SIGTERM sent to the whole process group — systemd's default
``KillMode=control-group``, supervisord's ``stopasgroup``, ``kill -TERM -<pgid>`` — kills them
on the spot, usually while the sentinel sleeps in ``stop_event.wait()``. The main process's
handler then calls ``stop_event.set()``, whose ``Condition.notify_all()`` waits for the dead
sleeper to acknowledge the wake-up: forever (the sentinel stays a zombie, the main process runs
on, silently). A graceful stop is also unbounded: each worker finishes its task first, and a
turn may run for minutes.

``june_worker`` (the management command) uses :class:`PromptCluster` instead: its signal
handler only records the signal; the main thread then stops the cluster the way the design
already survives — the processes under it get SIGTERM (SIGKILL after ``grace`` seconds), like a
crash — and, once they are gone, expires the leases they held so a worker of another cluster
(or this one, restarted) resumes their turns at once instead of after the lease runs out.
Nothing here touches a multiprocessing lock a dead process may hold.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
import uuid
from multiprocessing import Event, current_process
from pathlib import Path
from typing import Any

from django_q.cluster import Cluster, get_mp_context
from django_q.conf import logger as q_logger
from django_q.conf import setproctitle

from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from sessions_app.store.lease import TAKEN
from sessions_app.workers.beat import forget_workers
from sessions_app.workers.sentinel import CrashSafeSentinel

log = logging.getLogger(__name__)

#: seconds the processes of a stopping cluster get between SIGTERM and SIGKILL
GRACE = 3.0


class PromptCluster(Cluster):
    """A django-q2 cluster whose stop is done by the main thread, not in the signal handler,
    and whose start takes no lock that a killed sentinel may hold."""

    stop_signal: int | None = None

    def sig_handler(self, signum, frame):
        # nothing that can block here: no logging, no multiprocessing primitive
        self.stop_signal = signum

    def start(self) -> int:
        """django-q2's ``Cluster.start``, except that its wait for the sentinel never takes the
        start event's lock, and ends at a stop signal.

        q2 polls ``start_event.is_set()``, which takes the lock of the event's condition. The
        sentinel takes the same lock each time it saves its status (``Stat``: right after it
        sets the event, then every guard cycle). A SIGTERM to the group that kills the sentinel
        while it holds that lock leaves the lock taken for good; a main process still in this
        wait (up to 0.1 s after the sentinel logs "running.") then blocked in ``is_set()``
        forever. Here the wait reads the event's flag without the lock."""
        if setproctitle:
            setproctitle.setproctitle(f"qcluster {current_process().name} {self.name}")
        self.stop_event = Event()
        self.start_event = Event()
        self.sentinel = get_mp_context().Process(
            target=CrashSafeSentinel,
            name=f"Process-{uuid.uuid4().hex}",
            args=(self.stop_event, self.start_event, self.cluster_id, self.broker, self.timeout),
        )
        self.sentinel.start()
        q_logger.info("Q Cluster %s starting.", self.name)
        while self.stop_signal is None and not _flag_set(self.start_event):
            if not self.sentinel.is_alive():
                if self.sentinel.exitcode == 0:  # as q2: a sentinel stopped on purpose
                    break
                q_logger.error(
                    "Q Cluster %s failed to start. Sentinel exited with code %s.", self.name, self.sentinel.exitcode
                )
                raise RuntimeError(
                    f"Q Cluster {self.name} failed to start: sentinel exited with code {self.sentinel.exitcode}"
                )
            time.sleep(0.1)
        return self.pid

    def run(self, poll: float = 0.1) -> int:
        """Start the cluster and wait for a stop signal (or the sentinel's death); stop it.
        Returns the process exit status: 0 after a signal, 1 if the sentinel died by itself."""
        if self.sentinel is None:
            try:
                self.start()
            except RuntimeError:  # the sentinel died while starting: by our signal, or not
                if self.stop_signal is None:
                    raise
        # the sentinel's children (workers, pusher, monitor), noted while they live: a SIGTERM to
        # the group kills them before the main thread can look, and their leases are released by pid
        seen: set[int] = set()
        while self.stop_signal is None and self.sentinel.is_alive():
            seen.update(children(self.sentinel.pid))
            time.sleep(poll)
        died = self.stop_signal is None
        how = "its sentinel died" if died else (signal.Signals(self.stop_signal).name if self.stop_signal else "done")
        log.info("cluster %s stopping (%s)", self.name, how)
        stopped = stop_descendants(os.getpid())
        self.sentinel.join(0)
        # a worker whose sentinel a SIGTERM to the group killed first is no longer below us, and
        # may still be dying: its last heartbeat must not land after the release (it kept the
        # lease it was running a turn under). Wait for those too, then release.
        stop_orphans(sorted(seen - set(stopped)))
        released = release_leases(sorted(seen | set(stopped)))
        forget_workers(sorted(seen | set(stopped)))  # their heartbeats: stopped, not gone missing
        log.info("cluster %s stopped: %d processes, %d leases released", self.name, len(stopped), released)
        return 1 if died else 0


def _flag_set(event: Any) -> bool:
    """A ``multiprocessing.Event``'s state, read without its lock (which a killed process may
    hold for good): the event is its semaphore ``_flag``, whose value is 1 once set."""
    try:
        return event._flag.get_value() > 0
    except NotImplementedError:  # sem_getvalue: not on macOS (where /proc is not either)
        return event.is_set()


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a live process, from /proc; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
    return int(fields[1]), fields[0]


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (one small /proc read per thread of it). A thread that ends
    while they are read is skipped, not the threads after it (its children, if any, are the
    process's: another thread lists them)."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return found
    for task in tasks:
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
    return found


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children first), read from /proc (Linux)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parents.setdefault(st[0], []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    while frontier:
        children = [c for p in frontier for c in parents.get(p, [])]
        found.extend(children)
        frontier = children
    return found


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] not in ("Z", "X")


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop_descendants(root: int, grace: float = GRACE) -> list[int]:
    """SIGTERM every process below ``root``, SIGKILL what is left after ``grace`` seconds, and
    wait until all are gone (reaping our own children). Returns their pids."""
    pids = descendants(root)
    _signal(pids, signal.SIGTERM)  # q2's processes keep SIGTERM's default action: they die
    deadline = time.monotonic() + grace
    killed = False
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        # a process started meanwhile (a sentinel still alive respawns a worker it saw die) is
        # stopped too: else it could claim a turn whose lease the stop is about to release
        born = [p for p in descendants(root) if p not in pids]
        if born:
            _signal(born, signal.SIGKILL if killed else signal.SIGTERM)
            pids += born
        left = [p for p in pids if _alive(p)]
        if not left:
            return pids
        if time.monotonic() > deadline and not killed:
            log.warning("processes %s ignored SIGTERM for %.0fs: SIGKILL", left, grace)
            _signal(left, signal.SIGKILL)
            killed = True
        time.sleep(0.02)


def stop_orphans(pids: list[int], grace: float = GRACE) -> None:
    """Stop the processes of ``pids`` still alive in this process group (the cluster's workers
    that lost their sentinel; a pid reused by a process of another group is left alone), and
    wait until they are gone: SIGTERM, SIGKILL after ``grace`` seconds."""
    group = os.getpgid(0)

    def ours(pid: int) -> bool:
        try:
            return _alive(pid) and os.getpgid(pid) == group
        except ProcessLookupError:
            return False

    left = [p for p in pids if ours(p)]
    _signal(left, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while left:
        if time.monotonic() > deadline:
            _signal(left, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.02)
        left = [p for p in left if _alive(p)]


def release_leases(pids: list[int]) -> int:
    """Expire the leases held by worker processes that are gone (``host:pid`` owners), so the
    next sweep re-delivers their turns now, and the marks of the turns they had taken and not
    claimed yet (``workers.taker``), so any runner takes those now. Safe: the owners are dead,
    and the fence refuses a stale attempt anyway. Returns the number of turns."""
    if not pids:
        return 0
    host = socket.gethostname()
    owners = [f"{host}:{pid}" for pid in pids]
    try:
        now = time.time()
        held = m.Turn.objects.filter(status=TurnStatus.RUNNING, lease_owner__in=owners).update(lease_expires_at=now)
        taken = m.Turn.objects.filter(
            status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING], lease_owner__in=[TAKEN + owner for owner in owners]
        ).update(lease_expires_at=now)
        return held + taken
    except Exception:  # the database is away: the leases run out by themselves
        log.exception("could not release the leases of %s", owners)
        return 0


__all__ = ["GRACE", "PromptCluster", "children", "descendants", "release_leases", "stop_descendants", "stop_orphans"]
