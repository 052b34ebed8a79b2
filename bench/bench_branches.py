#!/usr/bin/env python
"""What a branch costs on the Django store: the bytes one fork adds, and its time, at 10 and
1,000 messages of history before the fork point.

    .venv/bin/python bench/bench_branches.py                 # SQLite (a fresh file under /tmp)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/bench_branches.py

A session gets ``N`` messages of history through the engine (turns of a user message, a tool
call, its result and a reply, on a scripted model), then one short turn; then, ``BENCH_FORKS_SMALL``
(at 10) or ``BENCH_FORKS`` (at 1,000) times: fork at that turn's opening (an edit: the ``N`` messages before it are the shared
history), cancel the branch's queued turn, switch back. Bytes per fork are the growth of the
message, step, event and branch tables with every index (PostgreSQL: their TOAST too), divided
by the forks: the copied rows, their index entries, the Branch row, and the few events a fork,
its cancel and the switch back log. Beside it: the bytes the engine stored per message when it
wrote the history, so the copy reads as "about that much per shared message".
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agents_app.runtime import new_turn_id  # noqa: E402
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_bench_branches")
use_database(BENCH_DB)

#: history size -> forks measured (many at 10: a fork there is smaller than a page)
HISTORIES = {10: int(os.environ.get("BENCH_FORKS_SMALL", "200")), 1000: int(os.environ.get("BENCH_FORKS", "20"))}
TABLES = ("sessions_app_message", "sessions_app_step", "sessions_app_event", "sessions_app_branch")


class NullSink:
    async def publish(self, session, events):
        pass

    async def delta(self, session, event):
        pass


def stored_bytes() -> int:
    from django.db import connection

    names = ", ".join(f"'{t}'" for t in TABLES)
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(
                "SELECT sum(pg_relation_size(c.oid)) FROM pg_class c WHERE c.oid IN ("
                f" SELECT t.oid FROM pg_class t WHERE t.relname IN ({names})"
                " UNION SELECT i.indexrelid FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid"
                f" WHERE t.relname IN ({names})"
                f" UNION SELECT t.reltoastrelid FROM pg_class t WHERE t.relname IN ({names}) AND t.reltoastrelid <> 0)"
            )
        else:
            cur.execute(
                f"SELECT sum(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master "
                f"WHERE tbl_name IN ({names}))"
            )
        return int(cur.fetchone()[0] or 0)


async def history(store, ref, size: int) -> str:
    """``size`` messages of turns (4 a turn; a last turn of 2 makes up the rest), then one short
    turn of 2 whose id is returned: the fork point is its opening, position ``size``."""
    from agents_app.runtime import Agent, ScriptedModel, TurnExecutor, TurnInput, reply, tool

    @tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
    def noop(input, ctx):
        return {"ok": input.get("n")}

    agent = Agent("bench", "You are a benchmark.", tools=[noop])
    written, last = 0, ""
    while written <= size:
        full = size - written >= 4
        script = (
            [reply("checking the item", ("noop", {"n": written})), reply(f"item {written} is fine")]
            if full
            else [reply(f"item {written} is fine")]
        )
        model = ScriptedModel(script, chunk=1000)
        executor = TurnExecutor(
            store=store,
            sink=NullSink(),
            agent_for=lambda name: agent,
            model_for=lambda a, model=model: model,
            clock=time.time,
            lease_seconds=60,
        )
        last = new_turn_id()
        await store.create_turn(ref, TurnInput(text=f"please check item {written}"), turn_id=last)
        assert str(await executor.drive(last)) == "completed"
        written += 4 if full else 2
    return last


async def forks(store, ref, at: int, count: int) -> list[float]:
    from agents_app.runtime import TurnInput

    times = []
    for n in range(count):
        t = time.perf_counter()
        outcome = await store.fork(ref, TurnInput(text=f"edited {n}"), turn_id=new_turn_id(), at=at)
        times.append(time.perf_counter() - t)
        assert outcome.turn is not None
        await store.request_cancel(outcome.turn.turn_id, "requested")
        await store.switch(ref, 0)
    return times


def measure(size: int, count: int) -> dict:
    from django.db import connection

    from agents_app.runtime import SessionRef
    from sessions_app import models as m
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    ref = SessionRef("bench", f"branches-{size}")
    before = stored_bytes()
    asyncio.run(history(store, ref, size))
    seeded = stored_bytes() - before
    session = m.Session.objects.get(agent="bench", key=ref.key)
    messages = m.Message.objects.filter(session=session, generation=0).count()
    at = messages - 2
    events = m.Event.objects.filter(session=session, generation=0).count()
    before = stored_bytes()
    times = asyncio.run(forks(store, ref, at, count))
    grown = stored_bytes() - before
    first = m.Branch.objects.filter(session=session, parent_generation=0).order_by("generation").first()
    copied = m.Message.objects.filter(session=session, generation=first.generation).count()
    copied_events = m.Event.objects.filter(session=session, generation=first.generation).count()
    return {
        "vendor": connection.vendor,
        "history": at,
        "history_bytes": seeded / messages,
        "per_fork": grown / count,
        "forks": count,
        "ms": statistics.median(times) * 1000,
        "copied": copied,
        "copied_events": copied_events,
        "events": events,
    }


def main() -> None:
    fresh_database(BENCH_DB)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for size, count in HISTORIES.items():
        r = measure(size, count)
        # a history of 10 messages fits in pages the tables had: its "stored per message" says nothing
        wrote = f"; the engine stored {r['history_bytes']:,.0f} B per message writing it" if size >= 1000 else ""
        print(
            f"{r['vendor']}: fork at {r['history']} messages of history: {r['per_fork']:,.0f} B per fork "
            f"({r['per_fork'] / r['history']:,.0f} B per shared message{wrote}), {r['copied']} messages and "
            f"{r['copied_events']} events copied (of {r['events']}), median {r['ms']:.1f} ms per fork "
            f"({r['forks']} forks)"
        )


if __name__ == "__main__":
    main()
