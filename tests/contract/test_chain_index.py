"""A session that ran many turns costs each step what a new one does: the reads of its chain —
the claim, the hand-off, the status recompute, the enqueue's guard, a creation's "nothing
parked" — find its few unfinished
turns through the ``turn_chain`` index, never by reading every turn it ever ran (which made the
per-step cost grow with the session's age: bench/bench_short.py's flatness). Checked on the
planners' own plans: PostgreSQL's generic plan of the prepared statement the store sends,
SQLite's plan of the statement its store runs."""

from __future__ import annotations

import pytest
from django.db import connection

from sessions_app import models as m
from sessions_app.outbox import queue
from sessions_app.store import checkpoint, lease, lite, opening, reads, wire
from tests.conftest import is_postgres

pytestmark = pytest.mark.django_db

RAN = 400


@pytest.fixture
def old_session():
    """A session with RAN finished turns and one queued, among others, with the planner's statistics."""
    m.Session.objects.bulk_create([m.Session(agent="ops", key=f"other{i}") for i in range(50)])
    s = m.Session.objects.create(agent="ops", key="old")
    m.Turn.objects.bulk_create(
        [m.Turn(id=f"done{i:04d}", session=s, order=i, status="completed") for i in range(1, RAN + 1)]
        + [m.Turn(id="queued", session=s, order=RAN + 1, status="queued")])
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return s


def _statements(session_id: int) -> dict[str, tuple[str, list]]:
    return {
        "hand-off": (checkpoint.NEXT_IN_CHAIN, ["queued"]),
        "status recompute": (checkpoint.SESSION_STATUS_EVENT_SEQ,
                             checkpoint.session_status_params(session_id, "2026-12-01 00:00:00", events=1)),
        "claim": (lease.CLAIM, lease.claim_params("queued", "w", "a", 1.0, 30.0)),
        "enqueue guard": ("SELECT " + queue.CHAIN_HEAD, ["queued"]),
        "next queued": (reads.NEXT_QUEUED, ["ops", "old"]),
        "creation's facts": (lite.NEXT_IN_CHAIN, ["2026-12-01 00:00:00", "running", "ops", "old", "new"]),
    }


@pytest.mark.skipif("not is_postgres()")
def test_postgresqls_generic_plans_read_the_chain_by_its_index(old_session):
    prepared = {
        "hand-off": (checkpoint.NEXT_IN_CHAIN_PG, ["queued"]),
        "status recompute": (checkpoint.STATUS_AND_EVENT_SEQ,
                             checkpoint.session_status_params("queued", "2026-12-01 00:00:00+00", events=1)),
        "claim and load": (opening.CLAIM, ["running", "w", 31.0, "a", "queued", "queued", "running", 1.0]),
        "enqueue guard": (wire.numbered("SELECT " + queue.CHAIN_HEAD), ["queued"]),
        "creation's check": (opening.LOCK_AND_CHECK, ["ops", "old", "new"]),
    }
    with connection.cursor() as cur:
        cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")  # what a prepared statement runs after 5 uses
        for n, (name, (sql, params)) in enumerate(prepared.items()):
            cur.execute(f"PREPARE chain_{n} AS {sql.decode()}")
            cur.execute(f"EXPLAIN EXECUTE chain_{n}({', '.join(['%s'] * len(params))})", params)
            plan = "\n".join(row[0] for row in cur.fetchall())
            cur.execute(f"DEALLOCATE chain_{n}")
            # a creation's "nothing parked" may also take the (status, lease) index: the parked
            # turns of every session, which the statistics count (here none)
            assert "turn_chain" in plan or name == "creation's check", f"{name}:\n{plan}"
            assert "sessions_app_turn_session_id" not in plan, f"{name}:\n{plan}"


@pytest.mark.skipif("is_postgres()")
def test_sqlites_plans_read_the_chain_by_an_index_of_its_statuses(old_session):
    with connection.cursor() as cur:
        for name, (sql, params) in _statements(old_session.pk).items():
            cur.execute("EXPLAIN QUERY PLAN " + sql, params)
            steps = [row[-1] for row in cur.fetchall()]
            for step in steps:
                assert not step.startswith("SCAN") or "CONSTANT ROW" in step, f"{name}: {steps}"
                assert "sessions_app_turn_session_id" not in step, f"{name}: {steps}"  # every turn of it
                if "(session_id=?)" in step:  # the session alone: only an index of its few
                    assert "turn_chain" in step or "turn_waiting" in step, f"{name}: {steps}"


def test_the_chain_statements_answer_as_before(old_session):
    """The literals changed nothing the statements answer."""
    with connection.cursor() as cur:
        cur.execute(reads.NEXT_QUEUED, ["ops", "old"])
        assert cur.fetchone()[0] == "queued"
        cur.execute("SELECT " + queue.CHAIN_HEAD, ["queued"])
        assert cur.fetchone()[0] in (True, 1)
        cur.execute(checkpoint.SESSION_STATUS_PLAIN, checkpoint.session_status_params(old_session.pk, "2026-12-01 00:00:00"))
    old_session.refresh_from_db()
    assert old_session.status == "running"  # a queued turn keeps the session's chain busy
    m.Turn.objects.filter(pk="queued").update(status="suspended")
    with connection.cursor() as cur:
        cur.execute(checkpoint.SESSION_STATUS_PLAIN, checkpoint.session_status_params(old_session.pk, "2026-12-01 00:00:00"))
        cur.execute("SELECT " + queue.CHAIN_HEAD, ["queued"])
        assert cur.fetchone()[0] in (True, 1)  # nothing before it
    old_session.refresh_from_db()
    assert old_session.status == "suspended"
    m.Turn.objects.filter(pk="queued").update(status="completed")
    with connection.cursor() as cur:
        cur.execute(checkpoint.SESSION_STATUS_PLAIN, checkpoint.session_status_params(old_session.pk, "2026-12-01 00:00:00"))
        cur.execute(reads.NEXT_QUEUED, ["ops", "old"])
        assert cur.fetchone() is None
    old_session.refresh_from_db()
    assert old_session.status == "new"  # nothing unfinished, and no message written
