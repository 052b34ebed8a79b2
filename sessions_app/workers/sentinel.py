"""django-q2's sentinel with queues whose locks a dead worker cannot keep.

django-q2 hands tasks to its worker processes through a ``multiprocessing`` queue. A worker waits
for its next task in ``task_queue.get()``, which holds the queue's reader lock (a semaphore) for
the whole wait; the worker that dies there — SIGKILL, the OOM killer, a crash — keeps it for
good, and every other worker, the one q2 spawns in its place included, waits for it forever: the
cluster takes no task again, and says nothing. (q2 itself avoids terminating a live worker "to
not destabilize the queues".) Since a worker's turns run on its runner's thread
(``sessions_app.workers.runner``), a worker's main thread spends its life in that wait: a
death is a death there.

``CrashSafeSentinel`` is q2's ``Sentinel`` whose queues' reader and writer locks (the task queue's:
the workers', the pusher's; the result queue's: the workers', the monitor's) are
``ProcessLock``s: a ``flock`` on a file of the cluster's own, which the kernel releases when its
holder dies. So is each worker's timer lock, which q2's guard takes every cycle and a worker
takes as each task starts and ends. The rest is q2's. (A death in the microseconds between reading a task's
length and its bytes would still leave the pipe out of step; its pipe writes are single
``write`` calls for a task's size, and a worker waits before the length, not between.)
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import tempfile
import threading
import time
import uuid
from multiprocessing import Value, current_process
from typing import Any, Callable

from django.utils import timezone
from django_q import cluster as q_cluster
from django_q import monitor as q_monitor
from django_q import pusher as q_pusher
from django_q.brokers import get_broker
from django_q.cluster import get_mp_context
from django_q.conf import Conf
from django_q.conf import logger as q_logger
from django_q.humanhash import humanize
from django_q.queues import Queue
from django_q.scheduler import scheduler
from django_q.status import Stat


class ProcessLock:
    """A lock between processes (and the threads of each) that its holder's death releases: an
    exclusive ``flock`` on a file, opened anew in each process (a forked child shares its parent's
    open file, and with it the parent's lock), beside a lock for the process's own threads. The
    file is unlinked once opened (Linux reopens it through ``/proc/self/fd``); elsewhere it stays
    until ``close``."""

    def __init__(self) -> None:
        fd, self._path = tempfile.mkstemp(prefix="june-q2-lock-")
        self._origin = fd  # every process forked from here inherits it under this number
        self._created_in = os.getpid()
        self._reopen = f"/proc/self/fd/{fd}"
        if os.path.exists(self._reopen):
            os.unlink(self._path)
        else:  # no /proc: reopen by name
            self._reopen = self._path
        self._fd = fd
        self._threads = threading.Lock()
        self._opened_in = -1

    def _file(self) -> int:
        pid = os.getpid()
        if self._opened_in != pid:  # (a forked child shares its parent's open file: open its own)
            self._fd = os.open(self._reopen, os.O_RDWR)
            self._opened_in = pid
            self._threads = threading.Lock()
        return self._fd

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        fd = self._file()
        if timeout is not None and timeout < 0:
            timeout = None
        if not self._threads.acquire(block, -1 if timeout is None else timeout):
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if block and deadline is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
                return True
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    if not block or (deadline is not None and time.monotonic() >= deadline):
                        self._threads.release()
                        return False
                    time.sleep(0.005)
        except BaseException:
            if self._threads.locked():
                self._threads.release()
            raise

    def release(self) -> None:
        fcntl.flock(self._file(), fcntl.LOCK_UN)
        self._threads.release()

    def close(self) -> None:
        """Close this process's descriptors of the lock's file: no thread of it may use the lock
        after."""
        pid = os.getpid()
        if self._opened_in == pid and self._fd != self._origin:
            os.close(self._fd)
        if self._created_in == pid:
            os.close(self._origin)
        self._fd, self._opened_in, self._created_in = -1, -1, -1

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


class ReentrantProcessLock(ProcessLock):
    """A ``ProcessLock`` its holding thread may take again (a ``multiprocessing.Value``'s lock
    must be: q2's guard reads and writes a worker's timer while it holds the timer's lock)."""

    def __init__(self) -> None:
        super().__init__()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        me = threading.get_ident()
        if self._owner == me and self._opened_in == os.getpid():
            self._depth += 1
            return True
        if not super().acquire(block, timeout):
            return False
        self._owner, self._depth = me, 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            super().release()


class Role:
    """The pusher or the monitor, run as a daemon thread of the cluster's main process, with what
    q2's sentinel asks of the process it would have been (``pid``, ``name``, ``is_alive``)."""

    def __init__(self, target: Callable[..., Any], *args: Any) -> None:
        self.name = f"{target.__name__}-{uuid.uuid4().hex[:8]}"
        self.pid = os.getpid()
        self._thread = threading.Thread(target=target, args=args, name=f"june-q2-{target.__name__}", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        return None


#: ``prctl(2)``'s option that asks the kernel to signal a process when its parent dies
PR_SET_PDEATHSIG = 1
#: SIGTERM and SIGINT, blocked in the main thread around each fork (see ``_worker``)
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _worker(parent: int, closing: tuple[int, ...], *args: Any) -> None:
    """A worker process's start, before django-q2's ``worker``: it leaves the main process's
    signal handling behind (SIGTERM at its default action, SIGINT ignored, as q2's sentinel set
    them for the workers it forked), closes the main process's signal pipe, and dies with the
    main process (a SIGKILL from the kernel when its parent goes, however it goes)."""
    signal.set_wakeup_fd(-1)
    for fd in closing:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the main process died before the kernel watched it for us
        os._exit(1)
    # forked with SIGTERM and SIGINT blocked (``spawn_worker``): one sent meanwhile lands now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    q_cluster.worker(*args)


#: how often the guard saves the cluster's ``Stat``: q2's cache keeps one for 3 s (``Stat.save``),
#: so a reader always finds one
STAT_SECONDS = 1.0


class CrashSafeSentinel(q_cluster.Sentinel):
    """django-q2's sentinel run in the cluster's main process: it forks the worker processes and
    runs the pusher and the monitor as threads of its own; its queues' cross-process locks, and
    its workers' timers', are ``ProcessLock``s (module docstring). ``guard_once`` is one cycle of
    q2's guard; the main process's loop (``shutdown.PromptCluster.run``) calls it, and stops the
    cluster its own way (q2's ``stop`` is never called).

    Nothing here changes the main process's signal handling (q2's sentinel set SIGTERM to its
    default action and ignored SIGINT in its own process: that is the workers' now, ``_worker``).
    """

    def __init__(
        self, cluster_id: Any, broker: Any = None, timeout: int | None = None, *, closing: tuple[int, ...] = ()
    ):
        # q2's ``Sentinel.__init__`` without its signal dispositions and its start
        self.pid = os.getpid()
        self.parent_pid = self.pid  # the cluster's pid, as q2's status reports it
        self.cluster_id = cluster_id
        self.name = current_process().name
        self.broker = broker or get_broker()
        self.reincarnations = 0
        self.tob = timezone.now()
        # threads' events: nothing outside this process waits on them
        self.stop_event = threading.Event()
        self.start_event = threading.Event()
        self.pool_size = Conf.WORKERS
        self.pool: list[Any] = []
        self.timeout = timeout or Conf.TIMEOUT
        self.task_queue = Queue(maxsize=Conf.QUEUE_LIMIT) if Conf.QUEUE_LIMIT else Queue()
        self.result_queue = Queue()
        self.event_out = threading.Event()  # the pusher's stop (never set: the stop is ours)
        self.monitor: Any = None
        self.pusher: Any = None
        for queue in (self.task_queue, self.result_queue):
            queue._rlock = ProcessLock()
            if queue._wlock is not None:  # (None where writes need no lock)
                queue._wlock = ProcessLock()
        #: the timer locks of workers that died, closed at the next death (the guard releases
        #: the newest one after ``reincarnate`` returns)
        self._retired: list[ProcessLock] = []
        #: every worker process this cluster forked (their leases are released at its stop)
        self.spawned: list[int] = []
        #: descriptors a worker closes as it starts (the main process's signal pipe)
        self.closing = closing
        self._counter = 0.0
        #: when the guard last saved the cluster's status (time.monotonic()); None: never
        self._stat_at: float | None = None

    def start(self) -> None:
        """Fork the workers, start the pusher and the monitor; say the cluster runs."""
        self.broker.ping()
        self.spawn_cluster()
        self.start_event.set()
        self._save_stat(force=True)
        cluster = humanize(self.cluster_id.hex) + f" [{self.queue_name()}]"
        q_logger.info("%s guarding cluster %s", self.name, cluster)
        q_logger.info("Q Cluster %s running.", cluster)

    def guard_once(self, cycle: float, stopping: Callable[[], bool] = lambda: False) -> None:
        """One cycle of q2's guard: a worker dead (or out of time) is replaced, so is a pusher
        or a monitor thread that ended; the scheduler runs every 30 s; the status is saved
        (``_save_stat``). Nothing is replaced once ``stopping()`` (a stop signal arrived: the
        workers it killed stay dead)."""
        reincarnations = self.reincarnations
        for process in list(self.pool):  # (q2 iterates the list it changes)
            if stopping():
                return
            with process.timer.get_lock():
                if not process.is_alive() or process.timer.value == 0:
                    self.reincarnate(process)
                    continue
                if process.timer.value > 0:
                    process.timer.value -= cycle
        if not self.monitor.is_alive():
            self.reincarnate(self.monitor)
        if not self.pusher.is_alive():
            self.reincarnate(self.pusher)
        self._counter += cycle
        if self._counter >= 30 and Conf.SCHEDULER:
            self._counter = 0
            scheduler(broker=self.broker)
        self._save_stat(force=self.reincarnations != reincarnations)

    def _save_stat(self, *, force: bool = False) -> None:
        """q2's status of the cluster (``Stat``: its pids, for ``qinfo`` and ``qmonitor``), kept by
        q2's cache for a few seconds: saved every ``STAT_SECONDS``, and at once when a
        process was replaced. q2's guard built, pickled and signed it every cycle (0.5 s), the
        most of an idle cluster's main thread."""
        now = time.monotonic()
        if force or self._stat_at is None or now - self._stat_at >= STAT_SECONDS:
            self._stat_at = now
            Stat(self).save()

    def spawn_pusher(self) -> Role:
        return Role(q_pusher.pusher, self.task_queue, self.event_out, self.broker)

    def spawn_monitor(self) -> Role:
        return Role(q_monitor.monitor, self.result_queue, self.broker)

    def spawn_worker(self) -> None:
        # q2's own, but the timer's lock is one a dead worker cannot keep: q2's guard takes each
        # worker's timer lock every cycle, and a worker SIGKILLed while setting its timer (as a
        # task ends) left it taken: the guard waited for it forever, and no worker was ever
        # spawned again (tests/fault/test_budget.py, one run in three)
        lock: Any = ReentrantProcessLock()  # (typeshed knows multiprocessing's own locks only)
        timer = Value("f", -1, lock=lock)
        process = get_mp_context().Process(
            target=_worker,
            args=(os.getpid(), self.closing, self.task_queue, self.result_queue, timer, self.timeout),
            name=f"Process-{uuid.uuid4().hex}",
        )
        process.daemon = Conf.DAEMONIZE_WORKERS
        process.timer = timer
        self.pool.append(process)
        # SIGTERM and SIGINT blocked across the fork: the child unblocks them once it has its
        # own dispositions, so a stop signal sent meanwhile is neither lost nor taken for ours
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self.spawned.append(process.pid)

    def reincarnate(self, process: Any) -> None:
        for retired in self._retired:
            retired.close()
        self._retired = []
        timer = getattr(process, "timer", None)
        lock = timer.get_lock() if timer is not None else None
        super().reincarnate(process)
        if isinstance(lock, ProcessLock):
            self._retired.append(lock)
