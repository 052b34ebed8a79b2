"""sessions_app.store.threads.Threads: the runner's pool of threads starts ``CORE`` of them as
work comes and more only while the ones it has are held."""

from __future__ import annotations

import threading
import time

from sessions_app.store.threads import CORE, Threads


def compute(n: int) -> int:
    return sum(i * i for i in range(n))


def test_work_that_only_computes_takes_no_more_than_the_core_threads():
    """A burst of short pieces of work, each finished in far less than a window: no thread
    past the core (the executor it extends starts one per piece while none is idle, up to 8)."""
    pool = Threads(8, stall=30.0)
    try:
        futures = [pool.submit(compute, 2000) for _ in range(300)]
        assert [f.result(timeout=30) for f in futures] == [compute(2000)] * 300
        assert len(pool._threads) == CORE
        assert pool.finished == 300
    finally:
        pool.shutdown()


def test_held_threads_make_room_for_more_up_to_the_size():
    """Work that blocks (a tool that sleeps): every piece of it gets a thread of its own, up to
    the pool's size, and a piece waiting behind them runs once one is free."""
    pool = Threads(4, stall=0.01)
    release = threading.Event()
    started = []

    def held(n: int) -> int:
        started.append(n)
        release.wait(30)
        return n

    try:
        futures = [pool.submit(held, n) for n in range(5)]
        deadline = time.monotonic() + 30
        while len(started) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(started) == [0, 1, 2, 3]  # four threads; the fifth waits: the pool is at its size
        release.set()
        assert [f.result(timeout=30) for f in futures] == [0, 1, 2, 3, 4]
    finally:
        release.set()
        pool.shutdown()


def test_a_pool_that_closes_its_connections_closes_those_of_the_threads_it_started():
    pool = Threads(8)
    try:
        pool.submit(compute, 10).result(timeout=30)
        pool.close_connections()  # one thread started: one close, no wait for seven more
        assert len(pool._threads) == 1
    finally:
        pool.shutdown()
