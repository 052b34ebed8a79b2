#!/usr/bin/env python
"""Subagents through real qcluster workers, measured in ONE run (PostgreSQL by default):

    .venv/bin/python bench/bench_subagents.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/bench_subagents.py

Prints, with ratios from figures of the same run (one cluster, 2 workers):
  - a plain async tool call (the parent's ``fan_out`` with no child): action.requested ->
    action.completed of the parent;
  - one spawn: the parent's child.started -> its action.completed (park, the child's enqueue,
    claim and run, the wake, the parent's enqueue, claim and re-run of the tool), the child's own
    span (turn.started -> turn.completed), and the difference: the spawn's overhead;
  - 8 children of 0.5 s each (``slow:2``), in parallel (``spawn_all``) and one after the other:
    the parent's wall time (turn.started -> turn.completed) and the ratio.
Agents: tests/fault/agents (faultboss spawns faultagent children). Figures come from the event
log's timestamps, never from the polling loop.
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
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = "june_bench_subagents"
use_database(BENCH_DB, postgres_by_default=True)
os.environ["JUNE_AGENT_DIRS"] = str(ROOT / "tests" / "fault" / "agents")
FAULT_DIR = Path(tempfile.mkdtemp(prefix="june-bench-fault-"))
os.environ["JUNE_FAULT_DIR"] = str(FAULT_DIR)
REPEATS = int(os.environ.get("BENCH_REPEATS", "10"))
FAN = int(os.environ.get("BENCH_FAN", "8"))


def start(key: str, text: str) -> str:
    from sessions_app import services

    return services.turn_start(agent="faultboss", key=key, text=text, source="http").turn_id


def wait_completed(turn_id: str, timeout: float = 300.0) -> None:
    from sessions_app.models import Turn

    deadline = time.monotonic() + timeout
    while Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first() != "completed":
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for turn {turn_id}")
        time.sleep(0.05)  # figures come from the event log, not from this poll


def at(turn_id: str, type_: str, last: bool = False):
    from sessions_app.models import Event
    from sessions_app.store.eventlog import timed

    rows = timed(Event.objects.filter(turn_id=turn_id, type=type_)).order_by("seq").values_list("at", flat=True)
    return rows.last() if last else rows.first()


def ms(a, b) -> float:
    return (b - a).total_seconds() * 1000


def main() -> None:
    fresh_database(BENCH_DB)
    from django.db import connection

    from sessions_app.models import Turn
    from tests.fault.qcluster import Clusters

    print(f"database: {connection.vendor} ({BENCH_DB})  repeats: {REPEATS}  fan-out: {FAN}")
    clusters = Clusters(Path(tempfile.mkdtemp(prefix="june-bench-q-")))
    env = {
        "JUNE_Q_WORKERS": "2",
        "JUNE_LEASE_SECONDS": "10",
        "JUNE_SWEEP_SECONDS": "1",
        "JUNE_Q_POLL": "0.02",
        "LOG_LEVEL": "WARNING",
    }
    try:
        clusters.start(**env)
        wait_completed(start("warmup", "fan:1:steps:0"))
        plain, spawn, child_span, hop_child, hop_parent = [], [], [], [], []
        for n in range(REPEATS):
            p = start(f"plain-{n}", "fan:0")
            wait_completed(p)
            plain.append(ms(at(p, "action.requested"), at(p, "action.completed")))
            s = start(f"spawn-{n}", "fan:1:steps:0")
            wait_completed(s)
            child = Turn.objects.get(parent_id=s).pk
            spawn.append(ms(at(s, "child.started"), at(s, "action.completed")))
            child_span.append(ms(at(child, "turn.started"), at(child, "turn.completed")))
            hop_child.append(ms(at(s, "child.started"), at(child, "turn.started")))
            hop_parent.append(ms(at(child, "turn.completed"), at(s, "action.completed")))
        walls = {}
        for mode in ("fan", "seq"):
            t = start(f"{mode}-{FAN}", f"{mode}:{FAN}:slow:2")
            wait_completed(t)
            walls[mode] = ms(at(t, "turn.started"), at(t, "turn.completed")) / 1000
            assert Turn.objects.filter(parent_id=t, status="completed").count() == FAN
    finally:
        clusters.stop_all()

    plain_ms, spawn_ms, child_ms = (statistics.median(x) for x in (plain, spawn, child_span))
    overhead = spawn_ms - child_ms
    hop1, hop2 = statistics.median(hop_child), statistics.median(hop_parent)
    print(f"plain async tool call (requested -> completed):     {plain_ms:8.1f} ms")
    print(f"one spawn (child.started -> the parent's result):   {spawn_ms:8.1f} ms")
    print(f"  of which the child's own turn (started -> ended):  {child_ms:8.1f} ms")
    print(
        f"  spawn overhead (park, 2 enqueues + claims, wake):  {overhead:8.1f} ms"
        f"  ({overhead / plain_ms:.1f}x a plain tool call)"
    )
    print(f"    park committed -> the child's first commit:      {hop1:8.1f} ms  (enqueue, pickup, claim, load)")
    print(
        f"    the child's last commit -> the parent's result:  {hop2:8.1f} ms  (enqueue, pickup, claim, load,"
        " the tool again)"
    )
    print(f"{FAN} children of 0.5 s, in parallel on 2 workers:     {walls['fan']:8.2f} s")
    print(
        f"{FAN} children of 0.5 s, one after the other:          {walls['seq']:8.2f} s"
        f"  (parallel is {walls['seq'] / walls['fan']:.2f}x faster; the ideal on 2 workers is 2x)"
    )


if __name__ == "__main__":
    main()
