#!/usr/bin/env python
"""Short turns, as users run them: one tool call per turn (model -> tool -> model: 3 steps),
creation included, in one session whose history grows from 0 to 2,000 messages.

    .venv/bin/python bench/bench_short.py                 # SQLite (a fresh file under /tmp)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/bench_short.py
    BENCH_RUNS=6 .venv/bin/python bench/bench_short.py    # 6 runs: their medians, and a verdict
    .venv/bin/python bench/bench_short.py --trace         # traced: every span to an in-memory exporter

Each turn is ``create_turn`` + ``TurnExecutor.drive`` on the Django store in this process, with
an instant scripted model and a no-op sync tool (``BENCH_TOOL=async``: an async one, whose unit
runs no tool code on a thread, so no unit of the turn hops threads; the sync tool is what users
mostly write, and the figure the target is read from). Per step = turn time / 3. Printed at 10, 100,
1,000 and 2,000 messages of history (the median of the turns within a few messages of each
size) with the one-transaction floor measured between the turns of the same run, its ratio,
and the flatness 2,000 / 10; beside each, the process's CPU time per step (all threads: what
the engine and the store spend, without the waiting). The machine is noisy: compare the ratios
of one run, and the CPU figures when the machine is loaded.

Paired: the floor's median run-wide moves by the minute here (0.9 to 3.9 ms within one run on
PostgreSQL), so each measured turn also gets a floor of its own moment (``PAIRED`` samples
right before it and right after it, on a kept connection): the paired ratio is the median over
a size's turns of per-step ms / that floor, and its flatness the paired ratio at 2,000 over the
one at 10.

Control: right after each measured turn, a turn of a young session (0 to 12 messages of history;
a new session every ``CONTROL_TURNS`` turns), timed the same way. The sizes are measured at
different moments of a run, and a run's file and heap grow and its machine drifts between them;
the control shares each moment. Per step over the control's at 2,000 over the same at 10 is what
the history's length alone costs (the control flatness).

``BENCH_RUNS=N``: N runs, each in a process and a fresh database of its own, a line each, then
the medians over the runs and how many runs met issue 16's target (PostgreSQL: per step at every
size <= 3x the run's floor, flatness <= 1.3x; SQLite: per step <= 0.5 ms at every size). One
run's figures swing with the machine's load; the count of runs that met it is what to quote.
On PostgreSQL a run whose floor is over twice the top of the 0.26-0.37 ms the issue measured
against says the floor moved (a slower WAL flush, which a turn of three steps waits on five
times and the floor once: every ratio shrinks), and such runs are counted apart: they cannot
show the target.
Each run also times a fixed Python loop (the yardstick): the SQLite figures are CPU, and a host
that runs it 2x slower runs the turns about 2x slower too; it is printed to read them by, not a
target.

PostgreSQL: also what the server counted over ``COUNTED`` more turns after the timed ones (no
floor beside them; ``common.pg_counters``): write transactions per turn (transaction ids taken:
exact), WAL bytes per turn (exact) and WAL syncs per turn (the server's ``pg_stat_wal``: each
commit that waits for its flush, plus the WAL writer's background flushes of the asynchronous
ones). None of them moves with the machine's load: what a turn asks of the disk, beside what it
took.

SQLite: also the pages each turn wrote to the WAL (``common.wal_frames``), mean and median over
the run's turns. Each is a page-size write and its checksum; the count does not move with the
machine's load, so two trees compare by it where their times drift apart by more than they differ.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agents_app.runtime import new_turn_id  # noqa: E402
from bench.common import Floor, floor_ms, fresh_database, pg_counters, settle, use_database, wal_frames  # noqa: E402
from bench.short_report import (  # noqa: E402
    CONTROL_TURNS,
    COUNTED,
    ISSUE_FLOOR,
    MESSAGES_PER_TURN,
    PAIRED,
    SIZES,
    control_flatness,
    floor_moved,
    report,
    verdict,
)

BENCH_DB = os.environ.get("BENCH_DB", "june_bench_short")  # another name: runs side by side
use_database(BENCH_DB)

WINDOW = 12  # messages either side of a size whose turns count for it (3 turns each side)
CONTROL_BASE = 100_000  # the controls' turn numbers (their call ids), apart from the measured ones'


def yardstick_ms() -> float:
    """The machine's speed at pure Python, which the SQLite figures are made of: a fixed loop of
    a million additions (the median of 3, in ms). It swings with the host's load as turns do, so
    a run's SQLite figures are read beside it; it is not a target."""
    times = []
    for _ in range(3):
        t, total = time.perf_counter(), 0
        for i in range(1_000_000):
            total += i
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def make_agent():
    from agents_app.runtime import Agent, tool

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    if os.environ.get("BENCH_TOOL") == "async":  # no tool code on a thread: no unit hops

        @tool("noop", "does nothing", schema)
        async def noop(input, ctx):
            return {"ok": input.get("n")}
    else:

        @tool("noop", "does nothing", schema)
        def noop(input, ctx):
            return {"ok": input.get("n")}

    return Agent("bench", "You are a benchmark.", tools=[noop])


#: ``--trace``: the OpenTelemetry observer, its spans kept by an in-memory exporter (the cost of
#: tracing on; without the flag the executor's observer is None, as in a site with no OTEL_*)
OBSERVER = None


def traced_observer():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sessions_app.telemetry.otel import OtelObserver

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelObserver(provider), exporter


class NullSink:
    async def publish(self, session, events):
        return None

    async def delta(self, session, event):
        return None


async def one_turn(store, agent, key: str, n: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one turn, creation included; CPU is the process's, all threads."""
    from agents_app.runtime import ScriptedModel, SessionRef, TurnExecutor, TurnInput, reply

    model = ScriptedModel([reply("", ("noop", {"n": n}), call_prefix=f"t{n}_"), reply("done")], chunk=1000)
    executor = TurnExecutor(
        store=store,
        sink=NullSink(),
        agent_for=lambda name: agent,
        model_for=lambda a: model,
        clock=time.time,
        lease_seconds=60,
        observer=OBSERVER,
    )
    turn_id = new_turn_id()  # as the site makes them
    t, c = time.perf_counter(), time.process_time()
    await store.create_turn(SessionRef("bench", key), TurnInput(text=f"check {n}"), turn_id=turn_id)
    status = await executor.drive(turn_id)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - c
    assert str(status) == "completed", status
    return elapsed, cpu


async def run() -> dict:
    """One run: per-step ms and CPU ms by size (``ms``, ``cpu``), the run's floors (``floors``),
    the paired ratios by size (``paired``: each turn's per-step ms over the floor measured right
    beside it, their median) and those floors' medians (``beside``); on SQLite, the pages each
    turn wrote to the WAL (``pages``: a figure the machine's load does not move)."""
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    agent = make_agent()
    # the first floor creates its tables: a schema change, after which SQLite prepares every
    # statement of the store's connections again (the first turns after it cost twice as much)
    floors = [floor_ms(100)]
    yardsticks = [yardstick_ms()]
    beside = Floor()
    beside.samples(PAIRED)
    for n in range(5):  # warm-up: connections, prepared statements, caches
        await one_turn(store, agent, "warmup", n)
    samples: dict[int, list[float]] = {size: [] for size in SIZES}
    cpu: dict[int, list[float]] = {size: [] for size in SIZES}
    paired: dict[int, list[float]] = {size: [] for size in SIZES}
    locals_: dict[int, list[float]] = {size: [] for size in SIZES}
    control: dict[int, list[float]] = {size: [] for size in SIZES}
    pages: list[int] = []
    turns = (SIZES[-1] + WINDOW) // MESSAGES_PER_TURN + 1
    controls = 0
    gc.collect()
    await one_turn(store, agent, "warmup", 5)  # the first turn after a collect runs cold (about 2x)
    for n in range(turns):
        history = n * MESSAGES_PER_TURN
        near = [size for size in SIZES if abs(history - size) <= WINDOW]
        before = beside.samples(PAIRED) if near else []
        wal = wal_frames()
        elapsed, used = await one_turn(store, agent, "grows", n)
        if wal is not None and (after := wal_frames()) is not None and after >= wal:  # no restart
            pages.append(after - wal)
        if near:
            local = statistics.median(before + beside.samples(PAIRED))
            # the control: a turn of a young session right after (CONTROL_TURNS a session), so
            # what the run's progress costs (a bigger file, a bigger heap, the machine's drift)
            # is told apart from what the history's length costs
            controls += 1
            ctl, _ = await one_turn(store, agent, f"control{controls // CONTROL_TURNS}", CONTROL_BASE + controls)
        for size in near:
            control[size].append(ctl * 1000 / 3)
            samples[size].append(elapsed * 1000 / 3)
            cpu[size].append(used * 1000 / 3)
            paired[size].append(elapsed * 1000 / 3 / local)
            locals_[size].append(local)
        if n % 50 == 49:
            floors.append(floor_ms(100))
    floors.append(floor_ms(100))
    yardsticks.append(yardstick_ms())
    beside.close()
    from django.conf import settings

    counted = None
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):  # counted, not timed
        settle()
        before = pg_counters()
        for n in range(turns, turns + COUNTED):
            await one_turn(store, agent, "grows", n)
        settle()
        after = pg_counters()
        counted = {
            "xacts": (after["xid"] - before["xid"] - 1) / COUNTED,
            "wal_bytes": (after["wal_bytes"] - before["wal_bytes"]) / COUNTED,
            "wal_syncs": (after["wal_syncs"] - before["wal_syncs"]) / COUNTED,
        }

    def medians(by_size: dict[int, list[float]]) -> dict[int, float]:
        return {size: statistics.median(xs) for size, xs in by_size.items()}

    return {
        "ms": medians(samples),
        "cpu": medians(cpu),
        "floors": floors,
        "paired": medians(paired),
        "beside": medians(locals_),
        "control": medians(control),
        "pages": pages,
        "yardstick": statistics.median(yardsticks),
        "counted": counted,
    }


def repeat(runs: int) -> None:
    """``runs`` runs, each in a process and a database of its own, then the medians over the runs
    and how many runs met the target: one run's figures swing with the machine's load."""
    results, backend = [], ""
    for n in range(runs):
        out = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:]],
            env={**os.environ, "BENCH_RUNS": "1", "BENCH_JSON": "1"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        data = json.loads(out.rsplit("\nresult: ", 1)[1])
        by_size = {k for k, x in data["result"].items() if isinstance(x, dict) and k != "counted"}
        backend, result = (
            data["backend"],
            {k: ({int(s): v for s, v in x.items()} if k in by_size else x) for k, x in data["result"].items()},
        )
        results.append(result)
        floor = statistics.median(result["floors"])
        ms = result["ms"]
        print(
            f"run {n + 1}: floor {floor:.3f} ms; per step "
            + " / ".join(f"{v:.3f}" for v in ms.values())
            + " ms ("
            + " / ".join(f"{v / floor:.2f}x" for v in ms.values())
            + f"); flatness "
            f"{ms[SIZES[-1]] / ms[SIZES[0]]:.2f}x; paired "
            + " / ".join(f"{v:.2f}x" for v in result["paired"].values())
            + f"; control flatness {control_flatness(result):.2f}x; yardstick {result['yardstick']:.1f} ms"
            + (
                f"; per turn {c['xacts']:.2f} write txns, {c['wal_syncs']:.2f} WAL syncs, {c['wal_bytes']:.0f} B WAL"
                if (c := result.get("counted"))
                else ""
            )
            + ("   target met" if verdict(result, backend) else "   target NOT met")
            + ("  (the floor moved)" if floor_moved(result, backend) else "")
        )
    floor = statistics.median(statistics.median(r["floors"]) for r in results)
    ms = {size: statistics.median(r["ms"][size] for r in results) for size in SIZES}
    print(
        f"median over {runs} runs ({backend}): floor {floor:.3f} ms; per step "
        + " / ".join(f"{size}: {v:.3f} ms ({v / floor:.2f}x)" for size, v in ms.items())
        + f"; flatness {ms[SIZES[-1]] / ms[SIZES[0]]:.2f}x"
    )
    target = (
        "per step <= 0.5 ms at every size"
        if backend == "sqlite3"
        else "per step <= 3x the run's floor at every size, flatness <= 1.3x"
    )
    if counts := [r["counted"] for r in results if r.get("counted")]:
        print(
            "per turn, counted by the server (medians): "
            f"{statistics.median(c['xacts'] for c in counts):.2f} write transactions, "
            f"{statistics.median(c['wal_syncs'] for c in counts):.2f} WAL syncs, "
            f"{statistics.median(c['wal_bytes'] for c in counts):.0f} B of WAL"
        )
    print(
        f"python yardstick (the machine's speed, not a target): median "
        f"{statistics.median(r['yardstick'] for r in results):.1f} ms"
    )
    print(f"runs meeting issue 16's target ({target}): {sum(verdict(r, backend) for r in results)} of {runs}")
    if moved := sum(floor_moved(r, backend) for r in results):
        kept = [r for r in results if not floor_moved(r, backend)]
        print(
            f"  {moved} of the {runs} ran on a floor that moved (over {2 * ISSUE_FLOOR[1]:.2f} ms: a slower flush "
            f"than the {ISSUE_FLOOR[0]}-{ISSUE_FLOOR[1]} ms issue 16 measured against), which cannot show it; "
            f"of the other {len(kept)}: {sum(verdict(r, backend) for r in kept)} met it"
        )


def main() -> None:
    global OBSERVER
    runs = int(os.environ.get("BENCH_RUNS", "1"))
    if "--trace" in sys.argv[1:] and runs <= 1:
        OBSERVER, exporter = traced_observer()
        print("tracing on: spans to an in-memory exporter")
    if runs > 1:
        return repeat(runs)
    fresh_database(BENCH_DB)
    from django.conf import settings

    backend = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    result = asyncio.run(run())
    report(result, backend)
    if OBSERVER is not None:
        print(f"spans exported: {len(exporter.get_finished_spans())}")
    if os.environ.get("BENCH_JSON"):  # for ``repeat``
        print("result: " + json.dumps({"backend": backend, "result": result}))


if __name__ == "__main__":
    os.environ.setdefault("JUNE_LEASE_SECONDS", "60")
    main()
