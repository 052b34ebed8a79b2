#!/usr/bin/env python
"""The soak: 10,000 short turns through one cluster of 2 workers (PostgreSQL by default):

    .venv/bin/python bench/bench_soak.py                  # 10,000 turns
    BENCH_TURNS=2000 .venv/bin/python bench/bench_soak.py # a quick run (milestones scale)

Short turns as in bench/bench_throughput.py (model -> tool -> model, queued as POST ?wait=false
does), one session per turn by default (BENCH_SESSIONS: fewer sessions, longer histories). The
bench keeps a backlog of BENCH_BACKLOG queued turns (default 100) in front of the cluster and,
when 1/10, 1/2 and all of the turns have completed (1,000 / 5,000 / 10,000 by default), samples
every worker process's RSS (/proc/<pid>/status VmRSS; psutil is not installed) and its garbage
collections (a probe, bench/gcprobe, on the workers' PYTHONPATH). Per window (the last
BENCH_WINDOW turns before each milestone, default 500), from the event log: turn service time
(turn.started -> turn.completed) and step latency (between a turn's checkpoints) p50/p99, and
turns/s. Ratios: the last milestone over the first (target, issue 16: within 10%).

The workers run with JUNE_Q_RECYCLE high (100000) so one process lives through the whole soak:
django-q2's default (500 tasks) replaces a worker before a leak could show. Every turn is checked
completed exactly once. BENCH_TRACEMALLOC=1 also starts tracemalloc in the workers
(PYTHONTRACEMALLOC) and prints nothing more: use it with py-spy or a dump when RSS grows.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, use_cluster_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_soak_h5")
use_cluster_database(BENCH_DB)

TURNS = int(os.environ.get("BENCH_TURNS", "10000"))
SESSIONS = int(os.environ.get("BENCH_SESSIONS", "0")) or TURNS
BACKLOG = int(os.environ.get("BENCH_BACKLOG", "100"))
WINDOW = int(os.environ.get("BENCH_WINDOW", "0")) or min(500, TURNS // 10)
MILESTONES = (TURNS // 10, TURNS // 2, TURNS)
GC_DIR = Path(tempfile.mkdtemp(prefix="june-soak-gc-"))

from bench.workload import CLUSTER_ENV, check, pct, queue_turns, rss_kb, wait_done, warm, worker_pids  # noqa: E402


def unsettled(ids: list[str]) -> int:
    from sessions_app.models import Turn

    return Turn.objects.filter(pk__in=ids[-(BACKLOG * 3) :], status__in=("queued", "running")).count()


def completed_of(ids: list[str]) -> set[str]:
    from sessions_app.models import Turn

    return set(Turn.objects.filter(pk__in=ids, status="completed").values_list("id", flat=True)) if ids else set()


def hot_gen2(gc_figures: dict) -> list[float]:
    """A worker's gen-2 pauses (ms) after its start-up's ``gc.freeze()``: the hot path's."""
    return [ms for _, ms, *frozen in gc_figures.get("gen2", []) if frozen != [False]]


def gc_of(pid: int) -> dict:
    path = GC_DIR / f"{pid}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def main() -> None:
    fresh_database(BENCH_DB)
    from django.db import connection

    from tests.fault.qcluster import Clusters

    print(
        f"database: {connection.vendor} ({BENCH_DB})  turns: {TURNS}  sessions: {SESSIONS}  backlog: {BACKLOG}"
        f"  workers: 2 (recycle off)  window: {WINDOW}  load average at start: {os.getloadavg()[0]:.2f}"
        f" ({os.cpu_count()} cores)"
    )
    env = {
        **CLUSTER_ENV,
        "JUNE_Q_WORKERS": "2",
        "JUNE_Q_RECYCLE": "100000",
        "JUNE_GC_PROBE": str(GC_DIR),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench" / "gcprobe"), os.environ.get("PYTHONPATH", "")]),
    }
    if os.environ.get("BENCH_TRACEMALLOC"):
        env["PYTHONTRACEMALLOC"] = "1"
    clusters = Clusters(Path(tempfile.mkdtemp(prefix="june-bench-soak-")))
    cluster = clusters.start(**env)
    samples: dict[int, dict] = {}
    ids: list[str] = []
    t0 = time.time()
    try:
        warm(2)
        workers = worker_pids(cluster)
        pending = list(MILESTONES)
        # asks only after the turns not yet seen completed (about the backlog): a count over all
        # the milestone's ids, every 0.2 s, grew with the soak and took the cluster's CPU
        seen_completed: set[str] = set()
        while pending:
            if len(ids) < TURNS and unsettled(ids) < BACKLOG:
                n = min(BACKLOG, TURNS - len(ids))
                ids += queue_turns("soak", n, SESSIONS, first=len(ids))
            reached = False
            if len(ids) >= pending[0]:
                waiting = [i for i in ids[: pending[0]] if i not in seen_completed]
                now_completed = completed_of(waiting)
                seen_completed |= now_completed
                reached = len(now_completed) == len(waiting)
            if reached:
                m = pending.pop(0)
                samples[m] = {
                    "at": time.time(),
                    "rss": {p: rss_kb(p) for p in workers},
                    "gc": {p: gc_of(p) for p in workers},
                    "workers": worker_pids(cluster),
                }
                print(
                    f"  {m} turns completed after {time.time() - t0:.0f}s; worker RSS (MB):"
                    f" {', '.join(f'{v / 1024:.1f}' for v in samples[m]['rss'].values())}",
                    flush=True,
                )
            else:
                time.sleep(0.2)
        wait_done(ids)
    finally:
        clusters.stop_all()
    batch = check(ids)
    report(ids, samples, workers, batch)


def report(ids: list[str], samples: dict[int, dict], workers: list[int], batch) -> None:
    from sessions_app.models import Event
    from sessions_app.store.eventlog import timed

    print(
        f"\nevery one of {len(ids)} turns completed exactly once; retried: {batch.attempts_over_one};"
        f" worker processes unchanged: {all(s['workers'] == workers for s in samples.values())}"
    )
    print(
        f"{'after':>8}{'RSS MB':>18}{'turns/s':>9}{'turn p50':>9}{'turn p99':>9}{'step p50':>9}{'step p99':>9}"
        f"{'gen2 n':>8}{'gen2 max':>9}{'gen2 ms/turn':>13}"
    )
    rows = {}
    previous_gc: dict[int, tuple[int, float]] = {p: (0, 0.0) for p in workers}
    previous_m = 0
    for m, sample in samples.items():
        window = ids[max(0, m - WINDOW) : m]
        w = check(window)
        stamps = timed(Event.objects.filter(turn_id__in=window, type="turn.completed")).values_list("at", flat=True)
        times = sorted(t.timestamp() for t in stamps)
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
        hot = {p: hot_gen2(g) for p, g in sample["gc"].items()}
        n2 = sum(len(h) for h in hot.values()) - sum(c for c, _ in previous_gc.values())
        ms2 = sum(sum(h) for h in hot.values()) - sum(t for _, t in previous_gc.values())
        previous_gc = {p: (len(h), sum(h)) for p, h in hot.items()}
        max2 = max((ms for h in hot.values() for ms in h), default=0.0)
        rss = sample["rss"]
        rows[m] = dict(
            rss=statistics.mean(rss.values()),
            rate=rate,
            p50=pct(w.service_ms, 50),
            p99=pct(w.service_ms, 99),
            s50=pct(w.step_ms, 50),
            s99=pct(w.step_ms, 99),
        )
        print(
            f"{m:>8}{' / '.join(f'{v / 1024:.1f}' for v in rss.values()):>18}{rate:9.1f}{rows[m]['p50']:9.1f}"
            f"{rows[m]['p99']:9.1f}{rows[m]['s50']:9.2f}{rows[m]['s99']:9.2f}{n2:8d}{max2:9.2f}"
            f"{ms2 / max(m - previous_m, 1):13.4f}"
        )
        previous_m = m
    first, last = rows[MILESTONES[0]], rows[MILESTONES[-1]]
    print(
        f"\n{MILESTONES[-1]} vs {MILESTONES[0]}: RSS {last['rss'] / first['rss']:.3f}x, turn p50"
        f" {last['p50'] / first['p50']:.2f}x, p99 {last['p99'] / first['p99']:.2f}x, step p50"
        f" {last['s50'] / first['s50']:.2f}x, p99 {last['s99'] / first['s99']:.2f}x, turns/s"
        f" {last['rate'] / first['rate']:.2f}x   target within 10%: RSS"
        f" {'MET' if last['rss'] <= 1.1 * first['rss'] else 'MISSED'}, turn p50"
        f" {'MET' if last['p50'] <= 1.1 * first['p50'] else 'MISSED'}"
    )
    last_gc = samples[MILESTONES[-1]]["gc"].values()
    frozen = [g.get("frozen", 0) for g in last_gc]
    startup = [ms for g in last_gc for _, ms, *was_frozen in g.get("gen2", []) if was_frozen == [False]]
    print(
        f"gc.freeze() in the workers: {frozen} objects frozen; gen-2 columns: collections in the window"
        f" after the freeze (the hot path), the longest pause so far, pause ms per turn"
    )
    print(
        f"start-up, before any task: {len(startup)} gen-2 collection(s) (the freeze's own full collection,"
        f" one per worker), longest {max(startup, default=0.0):.1f} ms — not in the columns"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (the figures stretch with the machine's load)")


if __name__ == "__main__":
    main()
