#!/usr/bin/env python
"""Where a short turn's CPU time goes: bench_short.py's workload (create + drive a 1-tool-call
turn, 3 steps) in a loop under cProfile, after a history of ``PROFILE_HISTORY`` messages.

    .venv/bin/python bench/profile_short.py memory     # the in-memory store: the engine alone
    .venv/bin/python bench/profile_short.py django     # the Django store (SQLite, or DATABASE_URL)

Prints CPU ms per turn (process time of all threads, so waiting on the database does not count)
without the profiler, then the top functions by own time and by cumulative time, over the main
thread and asgiref's sync thread (where the Django store's work runs). ``PROFILE_TURNS`` turns are
measured (default 200), round robin over ``PROFILE_SESSIONS`` sessions (default 20) so the
history stays near ``PROFILE_HISTORY`` messages (default 10), made first by running turns (4
messages a turn).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = os.environ.get("PROFILE_DB", "june_profile_short")
TURNS = int(os.environ.get("PROFILE_TURNS", "200"))
HISTORY = int(os.environ.get("PROFILE_HISTORY", "10"))
SESSIONS = int(os.environ.get("PROFILE_SESSIONS", "20"))
TOP = int(os.environ.get("PROFILE_TOP", "30"))


async def turns(store, agent, start: int, count: int) -> None:
    """``count`` turns, numbered from ``start``, round robin over the sessions."""
    from bench.bench_short import one_turn

    for n in range(start, start + count):
        await one_turn(store, agent, f"s{n % SESSIONS}", n)


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "memory"
    if which == "django":
        use_database(BENCH_DB)
        fresh_database(BENCH_DB)
        from sessions_app.store import DjangoSessionStore

        store = DjangoSessionStore()
    else:
        from agents_app.runtime import InMemorySessionStore

        store = InMemorySessionStore()
    from bench.bench_short import make_agent

    agent = make_agent()
    seed = (HISTORY // 4 + 1) * SESSIONS
    asyncio.run(turns(store, agent, 0, seed))  # history and warm-up
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    asyncio.run(turns(store, agent, seed, TURNS))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    print(f"store: {which}  history: ~{HISTORY} messages  turns: {TURNS} over {SESSIONS} sessions")
    print(f"per turn: wall {wall * 1000 / TURNS:.3f} ms, cpu {cpu * 1000 / TURNS:.3f} ms")
    # the Django store's sync work runs on asgiref's one thread: profile it there too
    from asgiref.sync import SyncToAsync

    profiles = [cProfile.Profile(), cProfile.Profile()]
    worker = SyncToAsync.single_thread_executor
    worker.submit(profiles[1].enable).result()
    profiles[0].enable()
    asyncio.run(turns(store, agent, seed + TURNS, TURNS))
    profiles[0].disable()
    worker.submit(profiles[1].disable).result()
    stats = pstats.Stats(profiles[0])
    if profiles[1].getstats():
        stats.add(profiles[1])
    stats.sort_stats("tottime").print_stats(TOP)
    stats.sort_stats("cumulative").print_stats(TOP)


if __name__ == "__main__":
    os.environ.setdefault("JUNE_LEASE_SECONDS", "60")
    main()
