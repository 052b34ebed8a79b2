#!/usr/bin/env python
"""Turns per second through real workers, with short demo-like turns (PostgreSQL by default):

    .venv/bin/python bench/bench_throughput.py            # 2 workers: turns/s, latency
    .venv/bin/python bench/bench_throughput.py table      # + 1/2/4 workers, 1/100/1,000 sessions
    BENCH_TURNS=200 DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/bench_throughput.py

A turn is one tool call (model -> tool -> model, an instant scripted model: bench/workload.py),
queued as POST ?wait=false does (``services.turn_start``). BENCH_TURNS turns (default 400) are
queued over BENCH_SESSIONS sessions (default: one per turn) while a warm cluster of
BENCH_WORKERS workers (default 2: ``manage.py june_worker``) is paused (SIGSTOP), then let go:
turns/s is the turns over the span from the thaw to the last ``turn.completed``. Per turn, from
the event log: service time (turn.started -> turn.completed) p50/p99, per step (service / the
turn's checkpoints) and the gaps between its checkpoints (step latency) p50/p99; the cluster's
CPU per turn (cpu/turn, ms: every process of it, not the database's), the database's (db cpu,
ms: its backends' CPU, on a local PostgreSQL), database connections
opened per turn (conn) and turns that took more than one attempt (retry). Every turn is
checked: status completed and exactly one ``turn.completed`` event (else the bench fails).
On a loaded machine turns/s follows the load; cpu/turn, db cpu and conn much less so. On 2
cores turns/s is at most about 2 cores / (cpu/turn + db cpu).

``table`` adds, each in a fresh cluster: turns/s with 1, 2 and 4 worker processes (one
session per turn), and per-step cost with 1, 100 and 1,000 sessions active at once (2 workers;
max(BENCH_TURNS, sessions) turns spread round-robin, so a session's turns form its chain and
run one at a time). On 2 cores: read where the curve bends against the cores, not the workers.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import floor_ms, fresh_database, use_cluster_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_throughput_h5")
use_cluster_database(BENCH_DB)

TURNS = int(os.environ.get("BENCH_TURNS", "400"))
SESSIONS = int(os.environ.get("BENCH_SESSIONS", "0")) or TURNS
WORKERS = int(os.environ.get("BENCH_WORKERS", "2"))

from bench.workload import CLUSTER_ENV, burst, pct  # noqa: E402


def run(clusters, workers: int, turns: int, sessions: int, label: str):
    """One fresh cluster of ``workers`` workers, one burst; returns (batch, turns/s)."""
    cluster = clusters.start(JUNE_Q_WORKERS=str(workers), **CLUSTER_ENV)
    try:
        return burst(cluster, workers, f"{label}-{time.monotonic_ns()}", turns, sessions)
    finally:
        cluster.stop()


def row(name: str, batch, rate: float) -> str:
    per_step = batch.per_step_ms()
    return (
        f"{name:<26}{rate:9.1f}{pct(batch.service_ms, 50):9.1f}{pct(batch.service_ms, 99):9.1f}"
        f"{statistics.median(per_step):10.2f}{pct(batch.step_ms, 50):9.2f}{pct(batch.step_ms, 99):9.2f}"
        f"{batch.extra['cpu_ms']:9.1f}{batch.extra['db_cpu_ms']:8.1f}{batch.extra['connects']:7.2f}"
        f"{batch.attempts_over_one:6d}"
    )


HEADER = (
    f"{'':<26}{'turns/s':>9}{'turn p50':>9}{'turn p99':>9}{'ms/step':>10}{'step p50':>9}{'step p99':>9}"
    f"{'cpu/turn':>9}{'db cpu':>8}{'conn':>7}{'retry':>6}"
)


def main() -> None:
    table = "table" in sys.argv[1:]
    fresh_database(BENCH_DB)
    from django.db import connection

    from tests.fault.qcluster import Clusters

    print(
        f"database: {connection.vendor} ({BENCH_DB})  turns: {TURNS}  sessions: {SESSIONS}  workers: {WORKERS}"
        f"  agent: faultagent {'steps:1'} (model -> tool -> model)"
        f"  channel layer: {'redis' if os.environ.get('REDIS_URL') else 'unix sockets'}"
        f"  load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)"
    )
    floors = [floor_ms()]
    clusters = Clusters(Path(tempfile.mkdtemp(prefix="june-bench-tp-")))
    rows = []
    try:
        batch, rate = run(clusters, WORKERS, TURNS, SESSIONS, "tp")
        rows.append((f"{WORKERS} workers, {SESSIONS} sessions", batch, rate))
        if table:
            floors.append(floor_ms())
            for w in (1, 2, 4):
                b, r = run(clusters, w, TURNS, TURNS, f"w{w}")
                rows.append((f"{w} worker{'s' if w > 1 else ''}, {TURNS} sessions", b, r))
            floors.append(floor_ms())
            for s in (1, 100, 1000):
                b, r = run(clusters, 2, max(TURNS, s), s, f"s{s}")
                rows.append((f"2 workers, {s} session{'s' if s > 1 else ''} active", b, r))
    finally:
        clusters.stop_all()
    floors.append(floor_ms())
    floor = statistics.median(floors)
    print(
        f"\nsteps (checkpoints) per turn: {batch.steps_per_turn:.0f}   every turn completed exactly once: yes"
        f"   floor (one transaction of 3 statements): {floor:.3f} ms"
    )
    print(HEADER)
    for name, b, r in rows:
        print(row(name, b, r))
    head = rows[0]
    print(
        f"\nthroughput: {head[2]:.1f} turns/s ({head[2] * head[1].steps_per_turn:.0f} steps/s) with {WORKERS} workers;"
        f" per step {statistics.median(head[1].per_step_ms()) / floor:.1f}x the floor"
    )
    if table:
        by = {name: r for name, _, r in rows[1:]}
        one, two, four = (by[f"{w} worker{'s' if w > 1 else ''}, {TURNS} sessions"] for w in (1, 2, 4))
        print(f"scaling by workers: 2/1 = {two / one:.2f}x, 4/2 = {four / two:.2f}x (2 cores)")
        steps = {
            s: statistics.median(b.per_step_ms())
            for name, b, _ in rows[-3:]
            for s in [int(name.split(", ")[1].split()[0])]
        }
        print(
            f"per step by sessions active: 100/1 = {steps[100] / steps[1]:.2f}x, 1000/1 = {steps[1000] / steps[1]:.2f}x"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (the figures stretch with the machine's load)")


if __name__ == "__main__":
    main()
