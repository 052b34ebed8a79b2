#!/usr/bin/env python
"""The worker path, measured in ONE run (PostgreSQL by default):

    .venv/bin/python bench/bench_workers.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x .venv/bin/python bench/bench_workers.py

Prints, with ratios computed from figures of the same run:
  - floor: one psycopg transaction of three small statements (update, insert, insert), the
    median of measurements taken between the phases;
  - in-process per-step cost: the bare TurnLoop (unfenced) and the TurnExecutor (lease, heartbeat,
    fenced checkpoints, journal) on DjangoSessionStore -> the extra cost of fencing + journal;
  - through real qcluster workers (2 workers): per-step cost one turn at a time and with 40 turns
    at once, and turns/s, with an instant scripted model.
  Every per-step figure is the turn's span in its event log (turn.started -> turn.completed) over
  its checkpointed steps;
  - queued -> started latency with an idle worker (Turn.created_at -> turn.started event);
  - SIGKILL of a worker mid-turn -> the turn completed by another cluster (default lease).
The agent is the fault-test agent (tests/fault/agents/faultagent, "steps:<n>": n model->no-op
sync tool round trips). Targets: per step via a worker <= 2.5x the floor; kill -> completed
within lease + 2 s; queued -> started <= 100 ms.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agents_app.runtime import new_turn_id  # noqa: E402
from bench.common import floor_ms, fresh_database, start, use_database, wait_status  # noqa: E402

BENCH_DB = "june_bench_workers"
use_database(BENCH_DB, postgres_by_default=True)
os.environ["JUNE_AGENT_DIRS"] = str(ROOT / "tests" / "fault" / "agents")
FAULT_DIR = Path(tempfile.mkdtemp(prefix="june-bench-fault-"))
os.environ["JUNE_FAULT_DIR"] = str(FAULT_DIR)

STEPS = int(os.environ.get("BENCH_STEPS", "20"))  # model -> tool round trips per turn
TURNS = int(os.environ.get("BENCH_TURNS", "40"))
SOLO = int(os.environ.get("BENCH_SOLO", "10"))  # turns run one at a time
AGENT = "faultagent"


async def _drive_and_close(turn_id: str) -> None:
    from sessions_app import wiring

    executor = wiring.executor()
    try:
        await executor.drive(turn_id)
    finally:
        await executor.sink.close()


async def _bare_loop(TurnLoop, agent, store, model, turn_id: str) -> None:
    from sessions_app import wiring

    sink = wiring.sink(background=True)  # the executor's sink, so only fencing + lease + journal differ
    try:
        await TurnLoop(agent=agent, store=store, sink=sink, model=model).run(turn_id, None)
    finally:
        await sink.close()


def steps_of(turn_id: str) -> int:
    from sessions_app.selectors import step_keys

    return len(step_keys(turn_id)) + 1  # + the opening


def in_process_ms(fenced: bool, repeats: int = 5) -> float:
    """Per checkpointed step, engine in this process: the bare loop or the executor."""
    from agents_app.runtime.loop import TurnLoop
    from agents_app.runtime.seams import SessionRef, TurnInput
    from sessions_app import wiring

    store = wiring.store()
    per_step = []
    for _ in range(repeats):
        turn_id = new_turn_id()  # as the site makes them
        store.create_turn_sync(
            SessionRef(AGENT, f"inproc-{turn_id}"), TurnInput(text=f"steps:{STEPS}"), turn_id=turn_id
        )
        if fenced:
            asyncio.run(_drive_and_close(turn_id))
        else:
            agent = wiring.agent(AGENT)
            from agents_app.providers import model_for

            asyncio.run(_bare_loop(TurnLoop, agent, store, model_for(agent), turn_id))
        assert store.get_turn_sync(turn_id).status == "completed"
        per_step.append(per_step_of(turn_id))  # the same span as through a worker
    return statistics.median(per_step)


def event_time(turn_id: str, type_: str):
    from sessions_app.models import Event
    from sessions_app.store.eventlog import timed

    return timed(Event.objects.filter(turn_id=turn_id, type=type_)).values_list("at", flat=True).first()


def per_step_of(turn_id: str) -> float:
    """ms per checkpointed step of a finished turn, from its event log (turn.started -> turn.completed)."""
    span = event_time(turn_id, "turn.completed") - event_time(turn_id, "turn.started")
    return span.total_seconds() * 1000 / steps_of(turn_id)


def main() -> None:
    fresh_database(BENCH_DB)
    from django.db import connection

    from tests.fault.qcluster import Clusters

    print(f"database: {connection.vendor} ({BENCH_DB})  steps/turn: {STEPS * 2 + 2}  turns: {TURNS}")
    floors = [floor_ms()]  # measured between the phases: the machine drifts
    bare = in_process_ms(fenced=False)
    floors.append(floor_ms())
    fenced = in_process_ms(fenced=True)
    floors.append(floor_ms())

    clusters = Clusters(Path(tempfile.mkdtemp(prefix="june-bench-q-")))
    base_env = {
        "JUNE_LEASE_SECONDS": os.environ.get("JUNE_LEASE_SECONDS", "10"),
        "JUNE_SWEEP_SECONDS": "1",
        "JUNE_Q_POLL": "0.05",
        "LOG_LEVEL": "WARNING",
    }
    try:
        a = clusters.start(JUNE_Q_WORKERS="2", **base_env)
        wait_status([start("warmup", "steps:1")])
        # per step through a worker, one turn at a time (the other worker idle)
        alone = []
        for n in range(SOLO):
            i = start(f"solo-{n}", f"steps:{STEPS}")
            wait_status([i])
            alone.append(per_step_of(i))
        floors.append(floor_ms())
        # throughput: TURNS turns in TURNS sessions on 2 workers
        t = time.perf_counter()
        ids = [start(f"tp-{n}", f"steps:{STEPS}") for n in range(TURNS)]
        wait_status(ids)
        wall = time.perf_counter() - t
        worker_steps = [per_step_of(i) for i in ids]
        # queued -> started with an idle worker, one at a time
        from sessions_app.models import Turn

        latencies = []
        for n in range(20):
            i = start(f"lat-{n}", "steps:0")
            wait_status([i])
            latencies.append((event_time(i, "turn.started") - Turn.objects.get(pk=i).created_at).total_seconds() * 1000)
        a.kill()
        # SIGKILL of a worker mid-turn -> completed on another cluster
        victim = clusters.start(JUNE_Q_WORKERS="1", **base_env)
        clusters.arm("model1:start")
        doomed = start("kill", "mugs")
        clusters.reached("model1:start")
        other = clusters.start(JUNE_Q_WORKERS="1", **base_env)
        wait_status([start("probe", "steps:0")])  # the other cluster is up and idle
        killed = time.perf_counter()
        victim.kill()
        clusters.disarm("model1:start")
        wait_status([doomed], timeout=120)
        recovery = time.perf_counter() - killed
        other.kill()
    finally:
        clusters.stop_all()

    floors.append(floor_ms())
    floor = statistics.median(floors)
    lease = float(base_env["JUNE_LEASE_SECONDS"])
    per_worker = statistics.median(alone)
    loaded = statistics.median(worker_steps)
    lat = statistics.median(latencies)
    print(f"floor (update+insert+insert, one transaction): {floor:.3f} ms")
    print(f"in-process bare loop (unfenced):               {bare:.3f} ms/step  ({bare / floor:.2f}x floor)")
    print(f"in-process executor (lease+fence+journal):     {fenced:.3f} ms/step  ({fenced / floor:.2f}x floor)")
    print(f"  extra cost of fencing+lease+journal:         {fenced - bare:+.3f} ms/step")
    print(
        f"through a worker, one turn at a time (median): {per_worker:.3f} ms/step  ({per_worker / floor:.2f}x floor,"
        f" {per_worker / fenced:.2f}x in-process)  target <= 2.5x floor: {'MET' if per_worker <= 2.5 * floor else 'MISSED'}"
    )
    print(
        f"through 2 busy workers, {TURNS} turns at once:    {loaded:.3f} ms/step  ({loaded / floor:.2f}x floor;"
        " two turns, the database and the poller share 2 cores)"
    )
    print(
        f"throughput: {TURNS} turns x {STEPS * 2 + 2} steps in {wall:.2f}s = {TURNS / wall:.1f} turns/s,"
        f" {TURNS * (STEPS * 2 + 2) / wall:.0f} steps/s"
    )
    print(
        f"queued -> started, idle worker: median {lat:.1f} ms, max {max(latencies):.1f} ms"
        f"  target <= 100 ms: {'MET' if lat <= 100 else 'MISSED'}"
    )
    print(
        f"SIGKILL -> completed elsewhere: {recovery:.2f}s (lease {lease:.0f}s, sweep every"
        f" {base_env['JUNE_SWEEP_SECONDS']}s)  target <= lease + 2 s: "
        f"{'MET' if recovery <= lease + 2 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
