#!/usr/bin/env python
"""Where a short turn's CPU time goes: bench_short.py's workload (create + drive a 1-tool-call
turn, 3 steps) in a loop under cProfile, after a history of ``PROFILE_HISTORY`` messages.

    .venv/bin/python bench/profile_short.py memory     # the in-memory store: the engine alone
    .venv/bin/python bench/profile_short.py django     # the Django store (SQLite, or DATABASE_URL)

Prints CPU ms per turn (process time of all threads, so waiting on the database does not count)
without the profiler (its 10th percentile and median: a loaded machine only adds), the Python
function calls per turn (the same on a loaded machine), then the top functions by own time and by cumulative time, over the main
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
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = os.environ.get("PROFILE_DB", "june_profile_short")
TURNS = int(os.environ.get("PROFILE_TURNS", "200"))
HISTORY = int(os.environ.get("PROFILE_HISTORY", "10"))
#: blocking waits (another thread's work, the database's answer): not this process's CPU
WAITS = {
    "<method 'poll' of 'select.epoll' objects>",
    "<method 'get' of '_queue.SimpleQueue' objects>",
    "<built-in method select.select>",
    "<method 'acquire' of '_thread.lock' objects>",
}
AREAS = (
    ("runtime/memory.py", "memory store"),
    ("agents_app/runtime", "engine"),
    ("sessions_app/store", "store"),
    ("sessions_app", "sessions_app"),
    ("bench/", "bench"),
    ("django/db/models", "django ORM"),
    ("django/", "django other"),
    ("asgiref", "asgiref"),
    ("psycopg", "psycopg"),
    ("asyncio", "asyncio"),
    ("sqlite3", "sqlite3"),
)
SESSIONS = int(os.environ.get("PROFILE_SESSIONS", "20"))
TOP = int(os.environ.get("PROFILE_TOP", "30"))


async def turns(store, agent, start: int, count: int) -> list[float]:
    """``count`` turns, numbered from ``start``, round robin over the sessions: their CPU times."""
    from bench.bench_short import one_turn

    return [(await one_turn(store, agent, f"s{n % SESSIONS}", n))[1] for n in range(start, start + count)]


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
    t = time.perf_counter()
    cpu = sorted(asyncio.run(turns(store, agent, seed, TURNS)))
    wall = time.perf_counter() - t
    print(f"store: {which}  history: ~{HISTORY} messages  turns: {TURNS} over {SESSIONS} sessions")
    # a loaded machine only adds time: the low percentile is the figure to compare
    print(
        f"per turn: wall {wall * 1000 / TURNS:.3f} ms; cpu p10 {cpu[len(cpu) // 10] * 1000:.3f} ms, "
        f"median {statistics.median(cpu) * 1000:.3f} ms"
    )
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
    print(f"python function calls per turn: {stats.total_calls / TURNS:.0f}")  # type: ignore[attr-defined]
    by_area: dict[str, float] = {}
    for (filename, _, name), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name in WAITS:
            continue
        area = next((label for key, label in AREAS if key in filename), "other (stdlib, builtins)")
        by_area[area] = by_area.get(area, 0.0) + own
    total = sum(by_area.values())
    print(f"own time by area (profiled, waits left out: {total * 1000 / TURNS:.2f} ms per turn)")
    for area, own in sorted(by_area.items(), key=lambda kv: -kv[1]):
        print(f"  {area:<28} {own * 1000 / TURNS:7.3f} ms per turn  {own / total:6.1%}")
    stats.sort_stats("tottime").print_stats(TOP)
    stats.sort_stats("cumulative").print_stats(TOP)


if __name__ == "__main__":
    os.environ.setdefault("JUNE_LEASE_SECONDS", "60")
    main()
