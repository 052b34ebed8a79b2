"""A session that ran many turns costs each step what a new one does: the reads of its chain —
the claim, the hand-off, the status recompute, the enqueue's guard, a creation's "nothing
parked" — find its few unfinished
turns through the ``turn_chain`` index, never by reading every turn it ever ran (which made the
per-step cost grow with the session's age: bench/bench_short.py's flatness). Checked on the
planners' own plans: PostgreSQL's generic plan of the prepared statement the store sends,
SQLite's plan of the statement its store runs."""

from __future__ import annotations

import re

import pytest
from django.db import connection

from sessions_app import models as m
from sessions_app.store import checkpoint, checkpoint_pg, checkpoint_plain, lease, lite, opening, reads, wire
from sessions_app.workers import taker
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
        + [m.Turn(id="queued", session=s, order=RAN + 1, status="queued")]
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return s


def _statements(session_id: int) -> dict[str, tuple[str, list]]:
    return {
        "hand-off": (checkpoint.NEXT_IN_CHAIN, ["queued"]),
        "status recompute": (
            checkpoint_plain.SESSION_STATUS_EVENT_SEQ,
            checkpoint.session_status_params(session_id, "2026-12-01 00:00:00", events=1),
        ),
        "claim": (lease.CLAIM, lease.claim_params("queued", "w", "a", 1.0, 30.0)),
        "take": (taker.ANY_LITE, [1.0, 1.0]),
        "next queued": (reads.NEXT_QUEUED, ["ops", "old"]),
        "creation's facts": (lite.NEXT_IN_CHAIN, ["2026-12-01 00:00:00", "running", "ops", "old", "new"]),
    }


@pytest.mark.skipif("not is_postgres()")
def test_postgresqls_generic_plans_read_the_chain_by_its_index(old_session):
    prepared = {
        "hand-off": (checkpoint_pg.NEXT_IN_CHAIN_PG, ["queued"]),
        "status recompute": (
            checkpoint_pg.numbered_events_sql(checkpoint_pg.STATUS_AND_EVENT_SEQ_SQL, 1, chain=True),
            [
                *checkpoint.session_status_params("queued", "2026-12-01 00:00:00+00", events=1),
                *[1, 0, "queued", 1, "{}", None, "queued", "queued"],
            ],
        ),
        "claim and load": (
            opening.CLAIM,
            _claim_params("a", "queued"),
        ),
        "take": (wire.numbered(taker.TAKE_PG.replace("%%", "%")), ["taken:w", 31.0, 1.0, 1.0, 8]),
        "creation's check": (opening.LOCK_AND_CHECK, ["ops", "old", None, None, "new"]),
    }
    for name, plan in _generic_plans(prepared).items():
        # a creation's "nothing parked" may also take the (status, created_at) index: the parked
        # turns of every session, which the statistics count (here none)
        assert "turn_chain" in plan or name == "creation's check", f"{name}:\n{plan}"
        assert "sessions_app_turn_session_id" not in plan, f"{name}:\n{plan}"


def _claim_params(attempt: str, turn_id: str) -> list:
    """``opening.CLAIM``'s: ``lease.CLAIM``'s (lease to 31 at 1), then the session's status twice,
    then the load's (no transcript held)."""
    return [
        "running",
        "w",
        31.0,
        attempt,
        "2026-12-01 00:00:00+00",
        turn_id,
        "queued",
        "running",
        1.0,
        "running",
        "running",
        None,
        None,
        0,
        0,
        0,
    ]


def _generic_plans(prepared: dict[str, tuple[bytes, list]]) -> dict[str, str]:
    """Each statement's plan as the store's prepared statement runs it after 5 uses (generic)."""
    plans = {}
    with connection.cursor() as cur:
        cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for n, (name, (sql, params)) in enumerate(prepared.items()):
            cur.execute(f"PREPARE plan_{n} AS {sql.decode()}")
            cur.execute(f"EXPLAIN EXECUTE plan_{n}({', '.join(['%s'] * len(params))})", params)
            plans[name] = "\n".join(row[0] for row in cur.fetchall())
            cur.execute(f"DEALLOCATE plan_{n}")
    return plans


def _unnumbered(sql: bytes) -> str:
    """A ``wire.numbered`` statement as Django's cursor takes it (its ``$n`` come in order)."""
    return re.sub(r"\$\d+", "%s", sql.decode())


@pytest.fixture
def young_tables():
    """A new database's tables: a few turns, never analyzed (autovacuum off, or before its first
    run), which the planner sizes by their pages. An ANALYZE of an earlier test left statistics
    in ``pg_class`` (written in place, not rolled back): this test's transaction sets them back
    to "never analyzed", and its rollback restores them."""
    s = m.Session.objects.create(agent="ops", key="young")
    m.Turn.objects.bulk_create(
        [
            m.Turn(id="first", session=s, order=1, status="completed"),
            m.Turn(id="queued", session=s, order=2, status="queued"),
        ]
    )
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE relname IN "
            "('sessions_app_turn', 'sessions_app_session')"
        )
        cur.execute(
            "DELETE FROM pg_statistic WHERE starelid IN "
            "('sessions_app_turn'::regclass, 'sessions_app_session'::regclass)"
        )
    return s


@pytest.mark.skipif("not is_postgres()")
def test_a_generic_plan_made_while_the_turns_are_few_reads_no_turn_it_does_not_need(young_tables):
    """A worker's connection keeps a prepared statement's generic plan until the statistics
    change: one made on a young table must not scan it, or every claim and hand-off reads all the
    turns ever run for as long as the connection lives (without autovacuum, for good:
    bench/bench_soak.py scanned the turn table twice a turn). The claim's NOT EXISTS and the
    hand-off's join on the head's id did."""
    prepared = {
        "claim and load": (
            opening.CLAIM,
            _claim_params("a", "queued"),
        ),
        "hand-off": (checkpoint_pg.NEXT_IN_CHAIN_PG, ["first"]),
        "heartbeat": (lease.HEARTBEAT_PG, [31.0, "queued", "a", "running"]),
        "status recompute": (
            checkpoint_pg.numbered_events_sql(checkpoint_pg.STATUS_AND_EVENT_SEQ_SQL, 1, chain=True),
            [
                *checkpoint.session_status_params("queued", "2026-12-01 00:00:00+00", events=1),
                *[1, 0, "queued", 1, "{}", None, "queued", "queued"],
            ],
        ),
        "take": (wire.numbered(taker.TAKE_PG.replace("%%", "%")), ["taken:w", 31.0, 1.0, 1.0, 8]),
        "creation's check": (opening.LOCK_AND_CHECK, ["ops", "young", None, None, "new"]),
    }
    for name, plan in _generic_plans(prepared).items():
        assert "Seq Scan on sessions_app_turn" not in plan, f"{name}:\n{plan}"
    # and they answer what they did: the head of a chain, claimed once
    claim = _unnumbered(opening.CLAIM)
    with connection.cursor() as cur:
        cur.execute(_unnumbered(checkpoint_pg.NEXT_IN_CHAIN_PG), ["first"])
        assert cur.fetchone()[:2] == ("queued", "queued")
        params = _claim_params("a", "queued")
        cur.execute(claim, params)
        assert cur.fetchone() is not None
        cur.execute(claim, params)  # held now (its lease runs to 31)
        assert cur.fetchone() is None
    m.Turn.objects.create(id="third", session=young_tables, order=3, status="queued")
    with connection.cursor() as cur:
        cur.execute(claim, _claim_params("b", "third"))
        assert cur.fetchone() is None  # "queued" (running) is ahead of it in the chain


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
                    # (or, for a creation's takeover fact, the index of open takeovers: one at most)
                    few = ("turn_chain", "turn_waiting", "takeover_one_open")
                    assert any(index in step for index in few), f"{name}: {steps}"


def test_the_chain_statements_answer_as_before(old_session):
    """The literals changed nothing the statements answer."""
    with connection.cursor() as cur:
        cur.execute(reads.NEXT_QUEUED, ["ops", "old"])
        assert cur.fetchone()[0] == "queued"
        cur.execute(f"SELECT t.id FROM sessions_app_turn AS t WHERE {taker.TAKEABLE}", [1.0, 1.0])
        assert cur.fetchall() == [("queued",)]  # the head of its chain: a runner takes it
        cur.execute(
            checkpoint_plain.SESSION_STATUS_PLAIN,
            checkpoint.session_status_params(old_session.pk, "2026-12-01 00:00:00"),
        )
    old_session.refresh_from_db()
    assert old_session.status == "running"  # a queued turn keeps the session's chain busy
    m.Turn.objects.filter(pk="queued").update(status="suspended")
    with connection.cursor() as cur:
        cur.execute(
            checkpoint_plain.SESSION_STATUS_PLAIN,
            checkpoint.session_status_params(old_session.pk, "2026-12-01 00:00:00"),
        )
    old_session.refresh_from_db()
    assert old_session.status == "suspended"
    m.Turn.objects.filter(pk="queued").update(status="completed")
    with connection.cursor() as cur:
        cur.execute(
            checkpoint_plain.SESSION_STATUS_PLAIN,
            checkpoint.session_status_params(old_session.pk, "2026-12-01 00:00:00"),
        )
        cur.execute(reads.NEXT_QUEUED, ["ops", "old"])
        assert cur.fetchone() is None
    old_session.refresh_from_db()
    assert old_session.status == "new"  # nothing unfinished, and no message written
