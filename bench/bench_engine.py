#!/usr/bin/env python
"""Per-step cost of the engine in-process on the Django store, against the physical floor.

    .venv/bin/python bench/bench_engine.py                 # SQLite (a fresh file under /tmp)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/bench_engine.py

A scripted model (instant) calls a no-op sync tool ``STEPS`` times per turn, after a session
history of 10, 100 and 1,000 messages; per-step cost = turn time / steps (model + tool). The
floor is one transaction of three small statements (update, insert, insert) through the same
driver, measured in the same run. Also prints storage per message against the message's own
JSON size. Ratios are what to compare: the machine is noisy.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, floor_ms  # noqa: E402
os.environ.setdefault("SECRET_KEY", "bench")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
BENCH_DB = "june_bench"
if os.environ.get("DATABASE_URL", "").startswith("postgres"):
    base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    os.environ["DATABASE_URL"] = f"{base}/{BENCH_DB}"
else:
    os.environ["JUNE_VAR_DIR"] = tempfile.mkdtemp(prefix="june-bench-")

HISTORIES = (10, 100, 1000)
STEPS = int(os.environ.get("BENCH_STEPS", "40"))  # tool round trips per turn
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))


def seed_history(agent: str, key: str, size: int) -> None:
    """A session with ``size`` messages of earlier turns (user/assistant/tool, realistic JSON)."""
    from agents_app.runtime.messages import Message, Role, ToolCall
    from sessions_app import models as m

    session = m.Session.objects.create(agent=agent, key=key)
    rows = []
    for i in range(size):
        kind = i % 4
        if kind == 0:
            msg = Message(Role.USER, text=f"please check item {i}", turn_id="old")
        elif kind == 1:
            msg = Message(Role.ASSISTANT, text="checking", turn_id="old",
                          tool_calls=(ToolCall(f"h{i}", "noop", {"n": i}),))
        elif kind == 2:
            msg = Message(Role.TOOL, turn_id="old", call_id=f"h{i - 1}", name="noop", result={"ok": i})
        else:
            msg = Message(Role.ASSISTANT, text=f"item {i} is fine", turn_id="old")
        rows.append(m.Message(session=session, generation=0, index=i, role=str(msg.role), data=msg.to_json()))
    m.Message.objects.bulk_create(rows, batch_size=500)


def make_agent():
    from agents_app.runtime import Agent, tool

    @tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
    def noop(input, ctx):
        return {"ok": input.get("n")}

    return Agent("bench", "You are a benchmark.", tools=[noop])


def scripted(steps: int):
    from agents_app.runtime import ScriptedModel, reply

    script = [reply("", ("noop", {"n": i}), call_prefix=f"s{i}_") for i in range(steps)] + [reply("done")]
    return ScriptedModel(script, chunk=1000)


class NullSink:
    async def publish(self, session, events):
        return None

    async def delta(self, session, event):
        return None


async def one_turn(agent, key: str) -> float:
    from agents_app.runtime import SessionRef, TurnExecutor, TurnInput
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    model = scripted(STEPS)
    executor = TurnExecutor(store=store, sink=NullSink(), agent_for=lambda name: agent,
                            model_for=lambda a: model, clock=time.time, lease_seconds=60)
    turn_id = uuid.uuid4().hex
    await store.create_turn(SessionRef("bench", key), TurnInput(text="go"), turn_id=turn_id)
    t = time.perf_counter()
    status = await executor.drive(turn_id)
    elapsed = time.perf_counter() - t
    assert str(status) == "completed", status
    return elapsed


def storage_figures() -> tuple[float, float]:
    """(bytes stored per message incl. steps/events/indexes, bytes of the message's own JSON)."""
    from django.conf import settings
    from django.db import connection

    from sessions_app import models as m

    count = m.Message.objects.count()
    own = sum(len(json.dumps(d, separators=(",", ":"))) for d in m.Message.objects.values_list("data", flat=True))
    with connection.cursor() as cur:
        if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
            cur.execute("SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['sessions_app_message',"
                        "'sessions_app_step','sessions_app_event']::regclass[]) AS c")
            total = cur.fetchone()[0]
        else:
            cur.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'sessions_app_message%' "
                        "OR name LIKE 'sessions_app_step%' OR name LIKE 'sessions_app_event%' "
                        "OR name IN (SELECT name FROM sqlite_master WHERE tbl_name IN "
                        "('sessions_app_message','sessions_app_step','sessions_app_event'))")
            total = cur.fetchone()[0] or 0
    return float(total) / count, own / count


def main() -> None:
    fresh_database(BENCH_DB)
    from django.conf import settings

    backend = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    agent = make_agent()
    floor = floor_ms()
    per_step: dict[int, float] = {}
    for size in HISTORIES:
        samples = []
        for r in range(REPEATS):
            key = f"h{size}-{r}"
            seed_history("bench", key, size)
            elapsed = asyncio.run(one_turn(agent, key))
            samples.append(elapsed * 1000 / (2 * STEPS + 1))
        per_step[size] = statistics.median(samples)
    floor_after = floor_ms()
    floor = statistics.median([floor, floor_after])
    stored, own = storage_figures()
    print(f"backend: {backend}   steps per turn: {2 * STEPS + 1}   repeats: {REPEATS}")
    print(f"floor (1 txn: update+insert+insert): {floor:.3f} ms")
    for size, ms in per_step.items():
        print(f"per step at {size:>5} messages of history: {ms:.3f} ms   ({ms / floor:.2f}x floor)")
    print(f"flatness: cost at {HISTORIES[-1]} / cost at {HISTORIES[0]} = {per_step[HISTORIES[-1]] / per_step[HISTORIES[0]]:.2f}x")
    print(f"storage per message (message+step+event rows, indexes): {stored:.0f} B; "
          f"the message's own JSON: {own:.0f} B ({stored / own:.2f}x)")


if __name__ == "__main__":
    main()
