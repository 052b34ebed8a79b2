"""The thread path of a worker's runner: a bounded pool of threads, each with a Django
connection of its own kept from call to call (a sync tool that sleeps holds only its thread),
and the care a kept connection needs (dropped when the server ended it, or after a failure).

The pool grows past its first ``CORE`` threads only while its threads are held: when work waits
and, over the last ``STALL`` seconds, the pool finished fewer pieces of work than it has
threads (a tool that sleeps, a slow call). Work that only computes — a burst of sync tools'
units, each a few statements — is finished as fast by ``CORE`` threads as by more: the
interpreter runs one thread's Python at a time, and every thread more that waits for it costs
every hand-over of it between threads (kernel wake-ups, each thread's CPU) and a database
connection of its own."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any, Callable, Coroutine, TypeVar

from django.db import connection, connections

from sessions_app.store import direct

T = TypeVar("T")


#: threads the pool starts as work comes, before it looks whether its threads are held
CORE = 2
#: the window over which a pool whose work waits looks for finished work (seconds)
STALL = 0.05


class Threads(ThreadPoolExecutor):
    """The thread path of a worker's runner: up to ``size`` threads, each with a Django
    connection of its own, kept from call to call; past ``CORE`` of them, one more only while
    the ones it has are held (the module's doc)."""

    def __init__(self, size: int, *, core: int = CORE, stall: float = STALL) -> None:
        super().__init__(size, thread_name_prefix="june-tool")
        self.size = size
        self.core = min(core, size)
        self.stall = stall
        self.finished = 0  # pieces of work finished (read by the watch, unlocked: a count)
        self._watch_lock = threading.Lock()
        self._watching = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return super().submit(self._counted, fn, *args, **kwargs)

    def _counted(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            self.finished += 1

    def _adjust_thread_count(self) -> None:
        """On every ``submit`` (the executor's hook): a thread more while under ``core``, as
        the executor does, and past it a watch of whether the pool's threads are held."""
        if len(self._threads) < self.core:
            super()._adjust_thread_count()  # (none when one is idle)
        elif not self._idle_semaphore.acquire(timeout=0):
            self._watch()

    def _watch(self) -> None:
        with self._watch_lock:
            if self._watching or len(self._threads) >= self._max_workers:
                return
            self._watching = True
        threading.Thread(target=self._grow, name="june-tool-watch", daemon=True).start()

    def _grow(self) -> None:
        """While work waits: a thread more whenever a window went by in which the pool finished
        less work than it has threads. Ends once nothing waits (the next backlog starts one)."""
        while True:
            seen = self.finished
            time.sleep(self.stall)
            with self._watch_lock:
                if self._shutdown or self._work_queue.empty() or len(self._threads) >= self._max_workers:
                    self._watching = False
                    return
            if self.finished - seen < len(self._threads):
                with self._shutdown_lock:
                    if not self._shutdown:
                        ThreadPoolExecutor._adjust_thread_count(self)

    def close_connections(self) -> None:
        """Close every thread's Django connection: one call on each thread at once (a barrier
        keeps a thread from taking two), from a thread outside the pool."""
        started = len(self._threads)
        if started == 0:
            return
        barrier = threading.Barrier(started + 1)

        def close() -> None:
            connections.close_all()
            with suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=10)

        futures = [self.submit(close) for _ in range(started)]
        with suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=10)
        for future in futures:
            future.result()


def drop_unusable_connections() -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and (conn.errors_occurred or not conn.is_usable()):
            conn.close()


def _psycopg(wrapper: Any) -> Any:
    """A Django connection's psycopg connection (None when it has none, or is not PostgreSQL's)."""
    return wrapper.connection if wrapper.vendor == "postgresql" else None


def on_pool_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for a thread of a runner's pool, which keeps its Django connection from call to
    call: after a failure, the connection is closed if it is what failed (the next call on the
    thread connects again)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not connection.in_atomic_block and direct.ended_while_idle(_psycopg(connection)):
            connection.close()  # the server ended it since the last call: connect again
        try:
            return fn(*args, **kwargs)
        except Exception:
            if not connection.in_atomic_block:
                drop_unusable_connections()
            raise

    return call


def inline(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a coroutine function that calls it at once, on the awaiting thread (a store's
    ``inline`` thread path: the caller owns Django's connection and drives the coroutine itself)."""

    async def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


def run_here(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end on this thread, with no event loop (a host
    call whose store runs ``inline``). One that suspends is a bug of the caller's choice: it is
    closed and raises, before it could go on without what it awaited."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a host call run inline awaited something that suspends")
