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

import fcntl
import os
import tempfile
import threading
import time
from multiprocessing import Value
from typing import Any

from django_q import cluster as q_cluster


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


class CrashSafeSentinel(q_cluster.Sentinel):
    """q2's sentinel; its queues' cross-process locks, and its workers' timers', are
    ``ProcessLock``s (module docstring)."""

    def __init__(self, *args: Any, start: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, start=False, **kwargs)
        for queue in (self.task_queue, self.result_queue):
            queue._rlock = ProcessLock()
            if queue._wlock is not None:  # (None where writes need no lock)
                queue._wlock = ProcessLock()
        #: the timer locks of workers that died, closed at the next death (the guard releases
        #: the newest one after ``reincarnate`` returns)
        self._retired: list[ProcessLock] = []
        if start:
            self.start()

    def spawn_worker(self) -> None:
        # q2's own, but the timer's lock is one a dead worker cannot keep: q2's guard takes each
        # worker's timer lock every cycle, and a worker SIGKILLed while setting its timer (as a
        # task ends) left it taken: the guard waited for it forever, and no worker was ever
        # spawned again (tests/fault/test_budget.py, one run in three)
        self.spawn_process(
            q_cluster.worker,
            self.task_queue,
            self.result_queue,
            Value("f", -1, lock=ReentrantProcessLock()),
            self.timeout,
        )

    def reincarnate(self, process: Any) -> None:
        for lock in self._retired:
            lock.close()
        self._retired = []
        timer = getattr(process, "timer", None)
        lock = timer.get_lock() if timer is not None else None
        super().reincarnate(process)
        if isinstance(lock, ProcessLock):
            self._retired.append(lock)
