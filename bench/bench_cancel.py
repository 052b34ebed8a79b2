#!/usr/bin/env python
"""How fast a cancel reaches one turn among many running in the same worker process:

    .venv/bin/python bench/bench_cancel.py                  # N = 1 and 500 (PostgreSQL by default)
    BENCH_N=1,100,500 BENCH_CANCELS=20 .venv/bin/python bench/bench_cancel.py

One ``june_worker`` cluster with ONE worker process (``JUNE_TURNS_PER_WORKER`` above N), N turns
of the fault agent's ``slow:`` model step (a delta every 0.25 s, for minutes) started and all
running in that process; then BENCH_CANCELS of them, one at a time, are cancelled as the API
does (``services.turn_cancel``: the durable request on the row, then the doorbell through the
channel layer to the worker). Latency: from the call to the turn's row reading ``cancelled``
(polled every 2 ms on the bench's own connection). A model step's cancel lands at its next
delta, so the floor is the wait for it (0 to 250 ms, about 125 ms on average); what matters is
that N = 500 costs no more than N = 1 — before the runner a worker process ran one turn, so
N = 1 is what a cancel cost then. Printed: p50 / p99 / max per N, their ratio to N = 1, the
load average beside each.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, start, use_cluster_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_cancel_bench")
use_cluster_database(BENCH_DB)

SIZES = [int(n) for n in os.environ.get("BENCH_N", "1,500").split(",")]
CANCELS = int(os.environ.get("BENCH_CANCELS", "20"))

from bench.workload import CLUSTER_ENV  # noqa: E402


def wait_count(ids: list[str], status: str, timeout: float = 180.0) -> None:
    from sessions_app.models import Turn

    deadline = time.monotonic() + timeout
    while Turn.objects.filter(pk__in=ids, status=status).count() < len(ids):
        if time.monotonic() > deadline:
            n = Turn.objects.filter(pk__in=ids, status=status).count()
            raise SystemExit(f"timed out: {n} of {len(ids)} turns {status}")
        time.sleep(0.05)


def cancel_latency(turn_id: str) -> float:
    from sessions_app import services
    from sessions_app.models import Turn

    t0 = time.perf_counter()
    services.turn_cancel(turn_id=turn_id)
    while Turn.objects.filter(pk=turn_id).values_list("status", flat=True)[0] != "cancelled":
        if time.perf_counter() - t0 > 30:
            raise SystemExit(f"turn {turn_id} not cancelled within 30 s")
        time.sleep(0.002)
    return (time.perf_counter() - t0) * 1000


def measure(clusters, n: int) -> dict[str, float]:
    cluster = clusters.start(JUNE_Q_WORKERS="1", JUNE_TURNS_PER_WORKER=str(max(n + 10, 200)), **CLUSTER_ENV)
    try:
        tag = time.monotonic_ns()
        ids = [start(f"cancel-{tag}-{i}", "slow:100000") for i in range(n)]
        wait_count(ids, "running")
        time.sleep(1.0)  # every turn streaming
        load = os.getloadavg()[0]
        picked = random.Random(n).sample(ids, min(CANCELS, n)) if n > 1 else ids * 0
        lat: list[float] = []
        if n == 1:  # one turn in the process: cancel it, start another, CANCELS times
            for i in range(CANCELS):
                tid = ids[0] if i == 0 else start(f"cancel-{tag}-one-{i}", "slow:100000")
                wait_count([tid], "running")
                time.sleep(0.3)
                lat.append(cancel_latency(tid))
        else:
            for tid in picked:
                lat.append(cancel_latency(tid))
                time.sleep(0.1)
        from sessions_app import services

        rest = [t for t in ids if t not in picked and (n > 1)]
        for tid in rest:
            services.turn_cancel(turn_id=tid)
        wait_count(rest, "cancelled")
        lat.sort()
        return {
            "p50": statistics.median(lat),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "max": lat[-1],
            "load": load,
            "load_end": os.getloadavg()[0],
        }
    finally:
        cluster.stop()


def main() -> None:
    fresh_database(BENCH_DB)
    from django.db import connection

    from tests.fault.qcluster import Clusters

    print(
        f"database: {connection.vendor} ({BENCH_DB})  one worker process  cancels per size: {CANCELS}"
        f"  load average at start: {os.getloadavg()[0]:.2f} (2 cores)\n"
    )
    clusters = Clusters(
        Path(tempfile.mkdtemp(prefix="june-bench-cancel-")), JUNE_LEASE_SECONDS="10", JUNE_SWEEP_SECONDS="5"
    )
    rows = {}
    try:
        for n in SIZES:
            rows[n] = measure(clusters, n)
    finally:
        clusters.stop_all()
    base = rows.get(1)
    print(f"{'running in the process':<24}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'p50 / N=1':>11}{'load':>12}")
    for n, r in rows.items():
        ratio = f"{r['p50'] / base['p50']:.2f}" if base else "—"
        print(f"{n:<24}{r['p50']:9.1f}{r['p99']:9.1f}{r['max']:9.1f}{ratio:>11}{r['load']:6.2f}→{r['load_end']:.2f}")
    print("\na model step's cancel lands at its next delta (every 250 ms): ~125 ms is the wait for it")


if __name__ == "__main__":
    main()
