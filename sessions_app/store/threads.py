"""The thread path of a worker's runner: a bounded pool of threads, each with a Django
connection of its own kept from call to call (a sync tool that sleeps holds only its thread),
and the care a kept connection needs (dropped when the server ended it, or after a failure)."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, Callable, Coroutine, TypeVar

from django.db import connection, connections

from sessions_app.store import direct

T = TypeVar("T")


class Threads(ThreadPoolExecutor):
    """The thread path of a worker's runner: ``size`` threads, each with a Django connection of
    its own, kept from call to call."""

    def __init__(self, size: int) -> None:
        super().__init__(size, thread_name_prefix="june-tool")
        self.size = size

    def close_connections(self) -> None:
        """Close every thread's Django connection: one call on each thread at once (a barrier
        keeps a thread from taking two), from a thread outside the pool."""
        barrier = threading.Barrier(self.size + 1)

        def close() -> None:
            connections.close_all()
            with suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=10)

        futures = [self.submit(close) for _ in range(self.size)]
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
