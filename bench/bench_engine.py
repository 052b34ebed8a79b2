#!/usr/bin/env python
"""Per-step cost of the engine in-process on the Django store, against the physical floor.

    .venv/bin/python bench/bench_engine.py                 # SQLite (a fresh file under /tmp)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/bench_engine.py
    BENCH_ONLY=storage .venv/bin/python bench/bench_engine.py   # the storage figures alone

A scripted model (instant) calls a no-op sync tool ``STEPS`` times per turn, after a session
history of 10, 100 and 1,000 messages; per-step cost = turn time / steps (model + tool). The
floor is one transaction of three small statements (update, insert, insert) through the same
driver, measured between the turns of the same run (its median). Also prints the storage per
message the engine writes (its row, step, events and every index), for small messages and for
2,000-character texts, against the message's own JSON size. Ratios are what to compare: the
machine is noisy.
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
from bench.common import floor_ms, fresh_database, use_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_bench")
use_database(BENCH_DB)

HISTORIES = (10, 100, 1000)
STEPS = int(os.environ.get("BENCH_STEPS", "40"))  # tool round trips per turn
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
#: ``storage``: print the storage figures only (no per-step timing)
ONLY = os.environ.get("BENCH_ONLY", "")


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
            msg = Message(
                Role.ASSISTANT, text="checking", turn_id="old", tool_calls=(ToolCall(f"h{i}", "noop", {"n": i}),)
            )
        elif kind == 2:
            msg = Message(Role.TOOL, turn_id="old", call_id=f"h{i - 1}", name="noop", result={"ok": i})
        else:
            msg = Message(Role.ASSISTANT, text=f"item {i} is fine", turn_id="old")
        rows.append(m.Message(session=session, generation=0, index=i, role=str(msg.role), data=msg.to_json()))
    m.Message.objects.bulk_create(rows, batch_size=500)


def seeded(key: str, size: int) -> str:
    seed_history("bench", key, size)
    gc.collect()  # the seeding's garbage is not the turn's: collect it before the clock starts
    return key


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
    executor = TurnExecutor(
        store=store,
        sink=NullSink(),
        agent_for=lambda name: agent,
        model_for=lambda a: model,
        clock=time.time,
        lease_seconds=60,
    )
    turn_id = new_turn_id()  # as the site makes them
    await store.create_turn(SessionRef("bench", key), TurnInput(text="go"), turn_id=turn_id)
    t = time.perf_counter()
    status = await executor.drive(turn_id)
    elapsed = time.perf_counter() - t
    assert str(status) == "completed", status
    return elapsed


def stored_bytes() -> int:
    """Bytes of the message, step and event tables and all their indexes (main forks)."""
    from django.conf import settings
    from django.db import connection

    with connection.cursor() as cur:
        if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
            cur.execute(
                "SELECT sum(pg_relation_size(c.oid)) FROM pg_class c WHERE c.oid IN ("
                " SELECT t.oid FROM pg_class t WHERE t.relname IN ('sessions_app_message','sessions_app_step',"
                "'sessions_app_event') UNION SELECT i.indexrelid FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
                " WHERE t.relname IN ('sessions_app_message','sessions_app_step','sessions_app_event')"
                " UNION SELECT t.reltoastrelid FROM pg_class t WHERE t.relname IN ('sessions_app_message',"
                "'sessions_app_step','sessions_app_event') AND t.reltoastrelid <> 0)"
            )
        else:
            cur.execute(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE "
                "tbl_name IN ('sessions_app_message','sessions_app_step','sessions_app_event'))"
            )
        return int(cur.fetchone()[0] or 0)


def storage_figures(payload: int, turns: int = 8) -> tuple[float, float]:
    """(bytes stored per message the engine wrote — its step, events and every index included —,
    bytes of that message's own JSON), over ``turns`` turns of a fresh session whose replies and
    tool results carry ``payload`` characters of prose."""
    import random

    from agents_app.runtime import Agent, ScriptedModel, SessionRef, TurnExecutor, TurnInput, reply, tool
    from sessions_app import models as m
    from sessions_app.store import DjangoSessionStore

    rnd = random.Random(payload)
    # real prose (this project's docs), so compression does what it would do to a model's text
    corpus = " ".join(f.read_text() for f in sorted((ROOT / "docs").glob("*.md")))

    def text() -> str:
        start = rnd.randrange(0, len(corpus) - payload) if payload else 0
        return corpus[start : start + payload]

    @tool("lookup", "looks something up", {"type": "object", "properties": {"n": {"type": "integer"}}})
    def lookup(input, ctx):
        return {"n": input.get("n"), "found": text()}

    agent = Agent("bench", "You are a benchmark.", tools=[lookup])
    store = DjangoSessionStore()
    key = f"storage-{payload}"
    before = stored_bytes()
    for _ in range(turns):
        script = [reply(text(), ("lookup", {"n": i}), call_prefix=f"s{i}_") for i in range(10)] + [
            reply(text() or "ok")
        ]
        model = ScriptedModel(script, chunk=1000)
        executor = TurnExecutor(
            store=store,
            sink=NullSink(),
            agent_for=lambda name: agent,
            model_for=lambda a, model=model: model,
            clock=time.time,
            lease_seconds=60,
        )
        turn_id = new_turn_id()  # as the site makes them
        asyncio.run(store.create_turn(SessionRef("bench", key), TurnInput(text="go"), turn_id=turn_id))
        assert str(asyncio.run(executor.drive(turn_id))) == "completed"
    grown = stored_bytes() - before
    # the denominator is each message's whole JSON as the engine produces it (loaded back, so a
    # row that stores less than its message does not shrink its own yardstick)
    session = m.Session.objects.get(agent="bench", key=key)
    messages = loaded_messages(session.pk, session.generation)
    own = sum(len(json.dumps(msg.to_json(), separators=(",", ":"))) for msg in messages)
    return grown / len(messages), own / len(messages)


def loaded_messages(session_id: int, generation: int) -> list:
    """The session's messages as the store loads them (``reads``), whole."""
    from django.db import connection

    from sessions_app.store import reads

    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(reads.TRANSCRIPT_PG, [session_id, generation, 0])
            return reads.messages_of(cur.fetchone()[0])
        cur.execute(reads.TRANSCRIPT, [session_id, generation, 0])
        return reads.messages_of(f"[{','.join([row[0] for row in cur.fetchall()])}]")


def print_storage(storage: dict[int, tuple[float, float]]) -> None:
    for payload, (stored, own) in storage.items():
        print(
            f"storage per message written by the engine (its row, step, events, indexes), "
            f"{'small messages' if not payload else f'{payload}-character prose'}: {stored:.0f} B; "
            f"the message's own JSON: {own:.0f} B ({stored / own:.2f}x)"
        )


def main() -> None:
    fresh_database(BENCH_DB)
    from django.conf import settings

    backend = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    if ONLY == "storage":
        print(f"backend: {backend}")
        print_storage({0: storage_figures(0, turns=40), 2000: storage_figures(2000)})
        return
    agent = make_agent()
    asyncio.run(one_turn(agent, seeded("warmup", 10)))  # connections open, statements prepared
    # rounds interleave the sizes and the floor, so a drift of the machine (these machines are
    # noisy: the floor moved 2x within minutes here) weighs on every figure alike
    samples: dict[int, list[float]] = {size: [] for size in HISTORIES}
    floors = [floor_ms(100)]
    for r in range(REPEATS):
        for size in HISTORIES:
            elapsed = asyncio.run(one_turn(agent, seeded(f"h{size}-{r}", size)))
            samples[size].append(elapsed * 1000 / (2 * STEPS + 1))
            floors.append(floor_ms(100))
    per_step = {size: statistics.median(xs) for size, xs in samples.items()}
    floor = statistics.median(floors)
    storage = {0: storage_figures(0, turns=40), 2000: storage_figures(2000)}  # enough rows to fill pages
    print(f"backend: {backend}   steps per turn: {2 * STEPS + 1}   repeats: {REPEATS}")
    print(f"floor (1 txn: update+insert+insert): {floor:.3f} ms")
    for size, ms in per_step.items():
        print(f"per step at {size:>5} messages of history: {ms:.3f} ms   ({ms / floor:.2f}x floor)")
    print(
        f"flatness: cost at {HISTORIES[-1]} / cost at {HISTORIES[0]} = {per_step[HISTORIES[-1]] / per_step[HISTORIES[0]]:.2f}x"
    )
    print_storage(storage)


if __name__ == "__main__":
    main()
