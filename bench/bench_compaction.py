#!/usr/bin/env python
"""Compaction's figures, in ONE run, in-process on the Django store:

    .venv/bin/python bench/bench_compaction.py                 # SQLite (a fresh file under /tmp)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/bench_compaction.py

- per-step cost (a turn of ``STEPS`` model -> no-op sync tool round trips, instant scripted model)
  after a session history of 10, 1,000, 10,000 and 100,000 messages, with compaction on (the
  history was compacted: its summary and a kept tail of one exchange are what the model sees)
  and, for contrast, off (the model sees everything); ratio 100,000 / 10 for each;
- bytes loaded per turn (the transcript ``load`` reads) at each size, on and off;
- the time of a compaction step (its summarizing call, instant, and its commit) against a plain
  model step, over a view of ``VIEW`` messages.
Ratios are what to compare: the machine is noisy; the sizes interleave within each round.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agents_app.runtime import new_turn_id  # noqa: E402
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = "june_bench_compaction"
use_database(BENCH_DB)

SIZES = (10, 1_000, 10_000, 100_000)
STEPS = int(os.environ.get("BENCH_STEPS", "20"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
VIEW = int(os.environ.get("BENCH_VIEW", "200"))
KEEP = 4  # the kept tail: one exchange of user, assistant (call), tool, assistant


def message(i: int):
    from agents_app.runtime.messages import Message, Role, ToolCall

    kind = i % 4
    if kind == 0:
        return Message(Role.USER, text=f"please check item {i}", turn_id="old")
    if kind == 1:
        return Message(
            Role.ASSISTANT, text="checking", turn_id="old", tool_calls=(ToolCall(f"h{i}", "noop", {"n": i}),)
        )
    if kind == 2:
        return Message(Role.TOOL, turn_id="old", call_id=f"h{i - 1}", name="noop", result={"ok": i})
    return Message(Role.ASSISTANT, text=f"item {i} is fine", turn_id="old")


def seed(key: str, size: int, *, compacted: bool) -> None:
    """``size`` messages of earlier turns; compacted: then a summary, the boundary before the
    last exchange (what a compaction of this history leaves)."""
    from agents_app.runtime.messages import Message, Role
    from sessions_app import models as m

    session = m.Session.objects.create(agent="bench", key=key)
    rows = [
        m.Message(session=session, generation=0, index=i, role=str(message(i).role), data=message(i).to_json())
        for i in range(size)
    ]
    if compacted:
        boundary = max(size - KEEP, 0)
        summary = Message(
            Role.SUMMARY,
            text="Summary: the user asked about many items; all were fine.",
            turn_id="old",
            boundary=boundary,
        )
        rows.append(m.Message(session=session, generation=0, index=size, role="summary", data=summary.to_json()))
        m.Session.objects.filter(pk=session.pk).update(boundary=boundary, summary_index=size)
    m.Message.objects.bulk_create(rows, batch_size=2000)
    settle_database()
    gc.collect()


def settle_database() -> None:
    """The seeding's after-effects are not the turn's: SQLite folds its write-ahead log back (an
    automatic checkpoint would otherwise land inside the turn), PostgreSQL refreshes statistics."""
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            cur.execute("ANALYZE sessions_app_message")


def make_agent(compaction: bool):
    from agents_app.runtime import Agent, tool

    @tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
    def noop(input, ctx):
        return {"ok": input.get("n")}

    return Agent("bench", "You are a benchmark.", tools=[noop], compaction=compaction)


class NullSink:
    async def publish(self, session, events):
        return None

    async def delta(self, session, event):
        return None


def executor_for(agent, model):
    from agents_app.runtime import TurnExecutor
    from sessions_app.store import DjangoSessionStore

    return TurnExecutor(
        store=DjangoSessionStore(),
        sink=NullSink(),
        agent_for=lambda name: agent,
        model_for=lambda a: model,
        clock=time.time,
        lease_seconds=60,
    )


async def one_turn(agent, key: str) -> tuple[float, int]:
    """(ms per checkpointed step, bytes of the transcript the turn's load read)."""
    from agents_app.runtime import ScriptedModel, SessionRef, TurnInput, reply

    script = [reply("", ("noop", {"n": i}), call_prefix=f"s{i}_") for i in range(STEPS)] + [reply("done")]
    executor = executor_for(agent, ScriptedModel(script, chunk=1000))
    turn_id = new_turn_id()  # as the site makes them
    await executor.store.create_turn(SessionRef("bench", key), TurnInput(text="go"), turn_id=turn_id)
    t = time.perf_counter()
    status = await executor.drive(turn_id)
    elapsed = time.perf_counter() - t
    assert str(status) == "completed", status
    state = await executor.store.load(turn_id)
    loaded = len(json.dumps([m.to_json() for m in state.transcript], separators=(",", ":")))
    return elapsed * 1000 / (2 * STEPS + 1), loaded


def compaction_vs_model_step() -> tuple[float, float]:
    """(ms of a compaction step, ms of a plain model step), over a view of VIEW messages: an
    overflow at the first model step compacts, then the step is redone."""
    from agents_app.runtime import ModelRequest, ScriptedModel, SessionRef, StopReason, TurnInput, reply
    from agents_app.runtime.loop_compaction import CompactionSteps
    from agents_app.runtime.loop_model import ModelStep

    # the loop's two collaborators, each timed at the method the loop calls
    steps = {"compact": (CompactionSteps, "compact"), "model": (ModelStep, "run")}
    timings: dict[str, list[float]] = {name: [] for name in steps}
    originals = {name: getattr(cls, method) for name, (cls, method) in steps.items()}

    def timed(name):
        async def run(self, *args, **kwargs):
            t = time.perf_counter()
            try:
                return await originals[name](self, *args, **kwargs)
            finally:
                timings[name].append((time.perf_counter() - t) * 1000)

        return run

    for name, (cls, method) in steps.items():
        setattr(cls, method, timed(name))
    state = {"overflowed": False}

    def script(request: ModelRequest):
        if request.purpose == "compact":
            return reply("Summary: many items, all fine.")
        if not state["overflowed"]:
            state["overflowed"] = True
            return reply(stop=StopReason.CONTEXT_OVERFLOW)
        return reply("done")

    agent = make_agent(True)
    compact_ms, model_ms = [], []
    try:
        for r in range(REPEATS * 3):
            key = f"compact-{r}"
            seed(key, VIEW, compacted=False)
            state["overflowed"] = False
            for name in timings:
                timings[name].clear()
            executor = executor_for(agent, ScriptedModel(script, chunk=1000))
            turn_id = new_turn_id()  # as the site makes them
            asyncio.run(executor.store.create_turn(SessionRef("bench", key), TurnInput(text="go"), turn_id=turn_id))
            assert str(asyncio.run(executor.drive(turn_id))) == "completed"
            # model steps: the overflowed one (which includes its compaction) and the redo
            compact_ms.append(timings["compact"][0])
            model_ms.append(timings["model"][-1])
    finally:
        for name, (cls, method) in steps.items():
            setattr(cls, method, originals[name])
    return statistics.median(compact_ms), statistics.median(model_ms)


def main() -> None:
    fresh_database(BENCH_DB)
    from django.conf import settings

    backend = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    agents = {True: make_agent(True), False: make_agent(False)}
    seed("warmup", 10, compacted=True)
    asyncio.run(one_turn(agents[True], "warmup"))
    per_step: dict[tuple[bool, int], list[float]] = {}
    loaded: dict[tuple[bool, int], int] = {}
    for r in range(REPEATS):
        for size in SIZES:
            for on in (True, False):
                key = f"{'on' if on else 'off'}-{size}-{r}"
                seed(key, size, compacted=on)
                ms, nbytes = asyncio.run(one_turn(agents[on], key))
                per_step.setdefault((on, size), []).append(ms)
                loaded[(on, size)] = nbytes
    compact, model = compaction_vs_model_step()
    print(f"backend: {backend}   steps per turn: {2 * STEPS + 1}   repeats: {REPEATS}")
    for on in (True, False):
        label = "compaction on " if on else "compaction off"
        for size in SIZES:
            ms = statistics.median(per_step[(on, size)])
            print(
                f"{label}: per step at {size:>7,} messages of history: {ms:7.3f} ms   "
                f"bytes loaded per turn: {loaded[(on, size)]:>10,}"
            )
        first, last = (statistics.median(per_step[(on, s)]) for s in (SIZES[0], SIZES[-1]))
        print(
            f"{label}: flatness: per step at {SIZES[-1]:,} / at {SIZES[0]} = {last / first:.2f}x; "
            f"bytes loaded {loaded[(on, SIZES[-1])] / loaded[(on, SIZES[0])]:.1f}x"
        )
    print(
        f"compaction step over a {VIEW}-message view (instant summarizer): {compact:.3f} ms; "
        f"plain model step: {model:.3f} ms ({compact / model:.2f}x)"
    )


if __name__ == "__main__":
    main()
