#!/usr/bin/env python
"""Reset time against the size of the session's archive (it must stay flat).

    .venv/bin/python bench/bench_reset.py                 # SQLite (a fresh file under /tmp)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/bench_reset.py

For archives of 10, 1,000 and 100,000 archived messages (and as many archived events), a
session gets a live generation of ``LIVE`` messages, events and a queued turn, then is reset;
``REPEATS`` resets per size, median and p90 reported. Timed: the store's reset (its one
transaction: cancel unfinished turns, record the reset, bump the generation, log the events) and
the whole ``services.session_reset`` (with the publish after commit). Reset archives by bumping
the generation number, so no archived row is read, copied or rewritten: the ratio between the
largest and the smallest archive should stay near 1.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = "june_bench_reset"
use_database(BENCH_DB)

ARCHIVES = tuple(int(n) for n in os.environ.get("BENCH_ARCHIVES", "10,1000,100000").split(","))
LIVE = int(os.environ.get("BENCH_LIVE", "10"))  # live messages (and events) each reset archives
REPEATS = int(os.environ.get("BENCH_REPEATS", "30"))
BATCH = 5000


def fill(session, turn, generation: int, count: int, first_seq: int) -> int:
    """``count`` messages and events in ``generation``; returns the next free event seq."""
    from sessions_app import models as m

    for start in range(0, count, BATCH):
        n = min(BATCH, count - start)
        m.Message.objects.bulk_create(
            m.Message(
                session=session,
                generation=generation,
                index=start + i,
                turn_id=turn.pk,
                role="user" if (start + i) % 2 == 0 else "assistant",
                data={
                    "role": "user" if (start + i) % 2 == 0 else "assistant",
                    "text": f"archived message {start + i} " + "lorem ipsum " * 8,
                },
            )
            for i in range(n)
        )
        m.Event.objects.bulk_create(
            m.Event(
                session=session,
                generation=generation,
                seq=first_seq + start + i,
                turn_id=turn.pk,
                type="message.completed",
                data={"type": "message.completed", "text": "x" * 40},
            )
            for i in range(n)
        )
    return first_seq + count


def build(archived: int):
    """A session whose earlier generations hold ``archived`` messages (and events)."""
    from sessions_app import models as m

    session = m.Session.objects.create(agent="ops", key=f"bench-{archived}-{uuid.uuid4().hex[:6]}")
    turn = m.Turn.objects.create(id=uuid.uuid4().hex, session=session, order=1, generation=0, status="completed")
    seq = fill(session, turn, 0, archived, 1)
    m.Session.objects.filter(pk=session.pk).update(generation=1, event_seq=seq - 1, turn_seq=1)
    m.SessionReset.objects.create(session=session, generation=0)
    session.refresh_from_db()
    return session


def live_generation(session) -> None:
    """What each timed reset archives: LIVE messages and events, and a queued turn."""
    from django.db.models import F

    from sessions_app import models as m

    session.refresh_from_db()
    turn = m.Turn.objects.create(
        id=uuid.uuid4().hex, session=session, order=session.turn_seq + 1, generation=session.generation, status="queued"
    )
    seq = fill(session, turn, session.generation, LIVE, session.event_seq + 1)
    m.Session.objects.filter(pk=session.pk).update(event_seq=seq - 1, turn_seq=F("turn_seq") + 1, status="running")


def time_resets(session, how: str) -> list[float]:
    from django.db import transaction

    from agents_app.runtime.seams import SessionRef
    from sessions_app import models as m
    from sessions_app import services
    from sessions_app.store import host_ops

    ref = SessionRef(session.agent, session.key)
    samples = []
    for _ in range(REPEATS):
        live_generation(session)
        before = m.Session.objects.get(pk=session.pk).generation
        t0 = time.perf_counter()
        if how == "store":
            with transaction.atomic():
                host_ops.reset(ref)
        else:
            services.session_reset(agent=session.agent, key=session.key)
        samples.append((time.perf_counter() - t0) * 1000)
        assert m.Session.objects.get(pk=session.pk).generation == before + 1
    return samples


def p90(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.9) - 1]


def main() -> None:
    fresh_database(BENCH_DB)
    from django.db import connection

    from sessions_app import models as m

    print(f"reset vs archive size — {connection.vendor}, {REPEATS} resets per size, {LIVE} live messages each")
    time_resets(build(0), "service")  # warm-up: connections, imports, caches
    rows = []
    for archived in ARCHIVES:
        t0 = time.perf_counter()
        session = build(archived)
        built = time.perf_counter() - t0
        store_ms = time_resets(session, "store")
        service_ms = time_resets(session, "service")
        total = m.Message.objects.filter(session=session).count()
        rows.append(
            (archived, statistics.median(store_ms), p90(store_ms), statistics.median(service_ms), p90(service_ms))
        )
        print(
            f"  archive {archived:>7,} msgs (built in {built:5.1f}s, {total:,} rows after): "
            f"store.host_ops.reset median {rows[-1][1]:6.2f} ms  p90 {rows[-1][2]:6.2f} ms | "
            f"services.session_reset median {rows[-1][3]:6.2f} ms  p90 {rows[-1][4]:6.2f} ms",
            flush=True,
        )
    small, large = rows[0], rows[-1]
    print(
        f"ratio {large[0]:,} / {small[0]:,} archived messages: store {large[1] / small[1]:.2f}x, "
        f"service {large[3] / small[3]:.2f}x (flat = about 1)"
    )


if __name__ == "__main__":
    main()
