#!/usr/bin/env python
"""Queued -> started through real workers (PostgreSQL by default), and django-q2's brokers alone:

    .venv/bin/python bench/bench_queue.py
    BENCH_TURNS=200 DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/bench_queue.py

An idle cluster of 2 workers (the poll, ``JUNE_Q_POLL``, default 0.05 s; lease and sweep at their
defaults) gets BENCH_TURNS turns one at a time (``services.turn_start``, what POST ?wait=false
runs), each started after the previous one completed, in BENCH_ROUNDS rounds (a fresh cluster
each: the machine drifts). A queued turn is delivered by its row: a runner's taker, woken by the
queuing transaction's ``NOTIFY`` (PostgreSQL) or a moved ``data_version`` (SQLite), takes it and
its loop claims it. Per turn, from the database's own timestamps: queued -> started,
``Turn.created_at`` -> the ``turn.started`` event (p50, p99, max).

Each cluster's idle cost is measured too (CPU of its processes, database sessions opened per
second over BENCH_IDLE_SECONDS). Then django-q2's brokers alone (they still carry the schedules'
and the deliveries' tasks), in this process: enqueue -> ``dequeue()`` returns the task, with a
thread looping on ``dequeue()`` like the pusher. Last, a full garbage collection of this
process's heap (a worker's, roughly) before and after ``gc.freeze()``, which every worker runs
once after start-up. Target (issue 16): queued -> started p50 <= 20 ms and p99 <= 60 ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, start, use_cluster_database, wait_status  # noqa: E402

BENCH_DB = "june_bench_queue"
use_cluster_database(BENCH_DB)

TURNS = int(os.environ.get("BENCH_TURNS", "200"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
POLL = os.environ.get("JUNE_Q_POLL", "0.05")
BROKERS = {"ORM (django-q2)": "django_q.brokers.orm.ORM", "NOTIFY": "sessions_app.workers.broker.NotifyingORM"}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


IDLE_SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS", "5"))


def cpu_seconds(session: int) -> float:
    """utime + stime of every live process of a cluster's session (the main process, its workers)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # field 6 of stat: the session id
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def sessions_opened() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def idle_cost(cluster) -> tuple[float, float]:
    """What an idle cluster costs, over IDLE_SECONDS of measuring (not waiting): its CPU in ms
    per second and the database sessions it opens per second."""
    cpu, opened, t = cpu_seconds(cluster.pid), sessions_opened(), time.monotonic()
    time.sleep(IDLE_SECONDS)
    span = time.monotonic() - t
    return (cpu_seconds(cluster.pid) - cpu) * 1000 / span, (sessions_opened() - opened) / span


def through_workers(clusters, label: str, turns: int) -> dict[str, list[float]]:
    from sessions_app.models import Event, Turn
    from sessions_app.store.eventlog import timed

    cluster = clusters.start(
        JUNE_Q_WORKERS="2",
        JUNE_Q_POLL=POLL,
        LOG_LEVEL="WARNING",
        JUNE_LEASE_SECONDS="10",
        JUNE_SWEEP_SECONDS="1",
    )  # the defaults, not the fault tests'
    try:
        wait_status([start(f"warm-{label}-{n}", "steps:0") for n in range(4)], timeout=120)
        idle = idle_cost(cluster)
        ids = []
        for n in range(turns):
            turn_id = start(f"q-{label}-{n}", "steps:0")
            wait_status([turn_id])  # the cluster is idle again before the next turn
            ids.append(turn_id)
    finally:
        cluster.stop()
    created = dict(Turn.objects.filter(pk__in=ids).values_list("id", "created_at"))
    started = dict(timed(Event.objects.filter(turn_id__in=ids, type="turn.started")).values_list("turn_id", "at"))
    ms = lambda a, b: (b - a).total_seconds() * 1000  # noqa: E731
    return {"total": [ms(created[i], started[i]) for i in ids], "idle_cpu": [idle[0]], "idle_sessions": [idle[1]]}


def broker_alone(dotted: str, n: int) -> list[float]:
    """enqueue -> dequeue() returns it, the broker in this process with a pusher-like thread."""
    import importlib

    from django.db import connections
    from django_q.conf import Conf

    module, name = dotted.rsplit(".", 1)
    broker = getattr(importlib.import_module(module), name)(list_key=f"bench-{name}")
    got: dict[int, float] = {}
    stop = threading.Event()

    def pusher() -> None:
        try:
            while not stop.is_set():
                for ack_id, _ in broker.dequeue() or []:
                    got[ack_id] = time.perf_counter()
                    broker.acknowledge(ack_id)
        finally:
            if hasattr(broker, "close_listener"):
                broker.close_listener()
            connections.close_all()

    thread = threading.Thread(target=pusher, daemon=True)
    thread.start()
    out = []
    try:
        for k in range(n):
            time.sleep(Conf.POLL * (k % 7) / 7)  # enqueue at spread phases of the poll
            t = time.perf_counter()
            ack_id = broker.enqueue("x")
            deadline = time.monotonic() + 10
            while ack_id not in got:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{dotted}: task not dequeued")
                time.sleep(0.0005)
            out.append((got[ack_id] - t) * 1000)
    finally:
        stop.set()
        thread.join(timeout=10)
    return out


def gen2_pause_ms(repeats: int = 5) -> tuple[float, float, int]:
    """A full collection in this process (Django, the apps and the engine loaded, as in a worker
    after its first turn) before and after ``gc.freeze()``, and the objects frozen."""
    import gc

    from sessions_app import wiring  # noqa: F401  what a worker has imported by its first turn
    from sessions_app.workers import tasks  # noqa: F401

    def collect() -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            gc.collect()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    before = collect()
    gc.freeze()
    try:
        return before, collect(), gc.get_freeze_count()
    finally:
        gc.unfreeze()


def main() -> None:
    fresh_database(BENCH_DB)
    from django.db import connection

    from tests.fault.qcluster import Clusters

    print(
        f"database: {connection.vendor} ({BENCH_DB})  turns: {TURNS}  poll: {POLL}s  workers: 2"
        f"  agent: faultagent steps:0  load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)"
    )
    clusters = Clusters(Path(tempfile.mkdtemp(prefix="june-bench-q-")))
    results: dict[str, list[float]] = {"total": [], "idle_cpu": [], "idle_sessions": []}
    try:
        for r in range(ROUNDS):
            for part, values in through_workers(clusters, f"r{r}", TURNS // ROUNDS).items():
                results[part].extend(values)
    finally:
        clusters.stop_all()
    alone = {label: broker_alone(dotted, max(TURNS // 2, 20)) for label, dotted in BROKERS.items()}

    v = results["total"]
    print(f"\n{'queued -> started (ms)':<34}{'p50':>8}{'p99':>8}{'max':>8}")
    print(f"{'a turn delivered by its row':<34}{pct(v, 50):8.1f}{pct(v, 99):8.1f}{max(v):8.1f}")
    print(f"\n{'django-q2 broker alone: enqueue -> dequeued':<34}{'p50':>8}{'p99':>8}{'max':>8}")
    for label, got in alone.items():
        print(f"{label:<34}{pct(got, 50):8.1f}{pct(got, 99):8.1f}{max(got):8.1f}")
    print(
        f"\nidle cluster: {statistics.median(results['idle_cpu']):.1f} ms CPU/s (its processes),"
        f" {statistics.median(results['idle_sessions']):.1f} database sessions opened/s"
    )
    before, after, frozen = gen2_pause_ms()
    print(
        f"a full (gen-2) collection of a worker-like heap: {before:.1f} ms; after gc.freeze()"
        f" ({frozen} objects frozen): {after:.2f} ms"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (the figures stretch with the machine's load)")
    p50, p99 = pct(v, 50), pct(v, 99)
    print(
        f"target p50 <= 20 ms: {'MET' if p50 <= 20 else 'MISSED'} ({p50:.1f});"
        f" p99 <= 60 ms: {'MET' if p99 <= 60 else 'MISSED'} ({p99:.1f})"
    )


if __name__ == "__main__":
    main()
