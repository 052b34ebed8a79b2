#!/usr/bin/env python
"""What Message Batches save, and what waiting on them costs a worker:

    .venv/bin/python bench/bench_batches.py [--turns 200] [--window 20] [--poll 5]

A real worker cluster (``manage.py june_worker``, one worker, PostgreSQL by default) on the fault
tests' ``batchagent`` (``batch = True``, Anthropic's API at the local Batches peer,
``tests/provider/fake_batches_api.py``, each answer 100 input and 20 output tokens).

- CPU while waiting: the cluster's processes' CPU time (``/proc``: user + system, every process
  of its group) over ``--window`` seconds idle, with nothing open, then over as long while
  ``--turns`` scheduled turns wait parked on their one batch, the poller passing every ``--poll``
  seconds. The goal: the second is the first plus the poller's passes, nothing per turn.
- Cost: once the batch ends and the turns settle, the recorded usage of the turns priced at the
  batch price (``pricing.cost_of``, ``JUNE_BATCH_PRICE_FACTOR``) and at the full price (the same
  usage without its ``batch_…`` keys), with their ratio.

Printed with the load average beside (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import fresh_database, use_cluster_database  # noqa: E402

MODEL = "claude-sonnet-4-6"


def group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of every live process of group ``pgid``."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def wait(cond, what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--poll", type=float, default=5.0)
    args = parser.parse_args()

    use_cluster_database("bench_batches")
    fresh_database("bench_batches")
    from sessions_app import models as m
    from sessions_app import pricing, services
    from tests.fault.qcluster import Clusters
    from tests.provider.fake_batches_api import FakeBatchesAPI

    peer = FakeBatchesAPI()
    peer.start()
    clusters = Clusters(
        Path(tempfile.mkdtemp(prefix="bench-batches-")),
        ANTHROPIC_API_KEY="sk-bench",
        ANTHROPIC_BASE_URL=peer.url,
        JUNE_AGENT_DIRS=os.environ["JUNE_AGENT_DIRS"],  # the fault agents and batchagent (use_cluster_database)
        JUNE_BATCH_POLL_SECONDS=str(args.poll),
        JUNE_LEASE_SECONDS="10",
    )
    try:
        cluster = clusters.start()
        time.sleep(max(args.window / 2, 10.0))  # its start-up (imports, migrations check) is not measured
        cpu0, retrieved0 = group_cpu(cluster.pid), peer.retrieved
        time.sleep(args.window)
        idle = group_cpu(cluster.pid) - cpu0
        idle_passes = peer.retrieved - retrieved0
        idle_load = load()

        began = time.monotonic()
        ids = [
            services.turn_start(
                agent="batchagent",
                key=f"run-{i}",
                text=f"report {i}",
                source="schedule",
                kind="proactive",
                by="cron:bench",
            ).turn_id
            for i in range(args.turns)
        ]
        wait(lambda: m.BatchCall.objects.filter(status="submitted").count() == args.turns, "the batch")
        parked = time.monotonic() - began
        cpu1, retrieved1 = group_cpu(cluster.pid), peer.retrieved
        time.sleep(args.window)
        waiting = group_cpu(cluster.pid) - cpu1
        passes = peer.retrieved - retrieved1
        waiting_load = load()

        peer.end()
        wait(lambda: m.Turn.objects.filter(pk__in=ids, status="completed").count() == args.turns, "the turns")
        usages = list(m.Turn.objects.filter(pk__in=ids).values_list("usage", flat=True))
        batch = sum(pricing.cost_of(u, MODEL) or 0.0 for u in usages)
        full = sum(
            pricing.cost_of({k: v for k, v in u.items() if not k.startswith("batch_")}, MODEL) or 0.0 for u in usages
        )
    finally:
        clusters.stop_all()
        peer.stop()

    print(f"{args.turns} scheduled turns of batchagent, one worker, poller every {args.poll:g} s")
    print(f"  parked and sent as {len(peer.created)} batch(es) in {parked:.1f} s")
    print(f"  worker CPU over {args.window:g} s idle:            {idle:.2f} s  (load {idle_load})")
    print(
        f"  worker CPU over {args.window:g} s, {args.turns} turns waiting: {waiting:.2f} s  (load {waiting_load}); "
        f"{passes} retrieve(s) by the poller (idle: {idle_passes})"
    )
    print(
        f"  extra CPU while waiting: {waiting - idle:+.2f} s ({(waiting - idle) / max(passes, 1) * 1000:.0f} ms a pass)"
    )
    print(f"  cost at full price:  ${full:.4f}")
    print(f"  cost at batch price: ${batch:.4f}  (ratio {batch / full:.2f})")


if __name__ == "__main__":
    main()
