"""A worker cluster in one main process and its workers, stopped within seconds however the stop
signal is delivered.

django-q2's ``qcluster`` (1.11) runs a main process, a sentinel process under it, and under the
sentinel the pusher, the monitor and the workers: four processes before the first worker, each
a fork of a Django process. It stops gracefully only when SIGTERM or SIGINT reaches its main
process alone: its other processes keep SIGTERM at its default action, so a SIGTERM sent to the
whole process group — systemd's default ``KillMode=control-group``, supervisord's
``stopasgroup``, ``kill -TERM -<pgid>`` — kills them on the spot, usually while the sentinel
sleeps in ``stop_event.wait()``; the main process's handler then waits in ``stop_event.set()``
for the dead sleeper, forever. A graceful stop is also unbounded: each worker finishes its task
first, and a turn may run for minutes.

``june_worker`` (the management command) runs :class:`PromptCluster` instead. Its main process
is the sentinel (``workers.sentinel.CrashSafeSentinel``): it forks the worker processes itself
and runs the pusher and the monitor as threads, so the cluster is the main process and its
workers. Its signal handler only records the signal (and wakes the main thread through the
signal pipe); the main thread, between guard cycles, then stops the cluster the way the design
already survives — the workers get SIGTERM (SIGKILL after ``grace`` seconds), like a crash —
and, once they are gone, expires the leases they held, so a worker of another cluster (or this
one, restarted) resumes their turns at once instead of after the lease runs out. A SIGTERM to
the group kills the workers as it did; the main process, their parent, knows every one of them
(they stay its zombies until it reaps them), so none of their leases is missed. A worker dies
with the main process however that goes (``prctl``'s parent-death signal: a SIGKILLed main
process leaves no worker running on without its guard). Nothing here touches a multiprocessing
lock a dead process may hold.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import time
from multiprocessing import current_process
from pathlib import Path

from django_q.cluster import Cluster
from django_q.conf import Conf, setproctitle
from django_q.conf import logger as q_logger

from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from sessions_app.outbox.queue import wake
from sessions_app.store.lease import TAKEN
from sessions_app.workers.beat import forget_workers
from sessions_app.workers.sentinel import CrashSafeSentinel
from sessions_app.workers.sweeper import sweep_expired

log = logging.getLogger(__name__)

#: seconds the processes of a stopping cluster get between SIGTERM and SIGKILL
GRACE = 3.0


class PromptCluster(Cluster):
    """A django-q2 cluster whose sentinel is its main process, and whose stop is done by the main
    thread, not in the signal handler."""

    stop_signal: int | None = None
    _wake: tuple[int, int] | None = None

    def sig_handler(self, signum, frame):
        # nothing that can block here: no logging, no lock (the signal pipe wakes the guard's wait)
        self.stop_signal = signum

    def _signal_pipe(self) -> tuple[int, int]:
        """A pipe the interpreter writes a byte to as each signal arrives (``set_wakeup_fd``),
        so the guard's wait ends at a stop signal, not at its cycle's end."""
        if self._wake is None:
            read, write = os.pipe()
            os.set_blocking(read, False)
            os.set_blocking(write, False)
            signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self._wake = (read, write)
        return self._wake

    def _wait(self, seconds: float) -> None:
        read = self._signal_pipe()[0]
        if self.stop_signal is not None:
            return
        ready, _, _ = select.select([read], [], [], seconds)
        if ready:
            try:
                while os.read(read, 512):
                    pass
            except BlockingIOError:
                pass

    def start(self) -> int:
        """Fork the workers and start the pusher and the monitor (``CrashSafeSentinel``), in this
        process: there is no sentinel process to wait for."""
        if setproctitle:
            setproctitle.setproctitle(f"qcluster {current_process().name} {self.name}")
        q_logger.info("Q Cluster %s starting.", self.name)
        self.sentinel = CrashSafeSentinel(self.cluster_id, self.broker, self.timeout, closing=self._signal_pipe())
        self.sentinel.start()
        return self.pid

    def run(self) -> int:
        """Start the cluster, guard it until a stop signal, stop it. Returns the process exit
        status: 0 after a signal, 1 when the guard failed (the cluster could not go on)."""
        self._signal_pipe()
        failed = False
        try:
            if self.sentinel is None:
                self.start()
            cycle = float(Conf.GUARD_CYCLE)
            while self.stop_signal is None:
                self.sentinel.guard_once(cycle, stopping=lambda: self.stop_signal is not None)
                self._wait(cycle)
        except Exception:
            log.exception("cluster %s: its guard failed", self.name)
            failed = True
        how = "its guard failed" if failed else (signal.Signals(self.stop_signal).name if self.stop_signal else "done")
        log.info("cluster %s stopping (%s)", self.name, how)
        if self.sentinel is not None:
            self.sentinel.event_out.set()  # the pusher claims no more tasks (it ends after its look)
        stopped = stop_descendants(os.getpid())
        # every worker this process forked, live or dead: a SIGTERM to the group kills them before
        # this thread looks, but they are its children, known by pid (and its zombies until the
        # stop above reaped them), so their leases are released whoever killed them
        workers = sorted(set(getattr(self.sentinel, "spawned", [])) | set(stopped))
        released = release_leases(workers)
        forget_workers(workers)  # their heartbeats: stopped, not gone missing
        log.info("cluster %s stopped: %d processes, %d leases released", self.name, len(stopped), released)
        return 1 if failed else 0


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a live process, from /proc; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
    return int(fields[1]), fields[0]


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
    except Exception:  # the database is away: the leases run out by themselves
        log.exception("could not release the leases of %s", owners)
        return 0
    _hand_on(held, taken)
    return held + taken


def _hand_on(held: int, taken: int) -> None:
    """The turns of released leases and marks, handed on now: the other clusters' watchdogs sleep
    until a lease they read runs out and their takers wait long when idle, so this process sweeps
    the expired leases itself (re-delivery, with its wake-up) and wakes the runners for the marks."""
    try:
        if held:
            sweep_expired()
        if taken:
            wake()
    except Exception:  # the database is away: other clusters' sweepers and takers find them later
        log.exception("could not hand on the released turns")


__all__ = ["GRACE", "PromptCluster", "descendants", "release_leases", "stop_descendants"]
