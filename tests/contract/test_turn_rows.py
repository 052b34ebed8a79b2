"""No index holds a message's or an event's turn (``message_step`` went in 0019: it cost ~75
bytes a message). A turn's rows are found by the tables' keys instead: its messages from its
opening (``Turn.opening``), its events in its session's log of its generation. Pinned on the
planners' own plans, in a database of many turns: the step memo's reads, the guard that records
a step once, and the admin's and the inbox's reads of a turn's rows never scan a table."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.models import OuterRef

from sessions_app import models as m
from sessions_app import selectors
from sessions_app.store import checkpoint, opening, reads, unit_sql, wire
from tests.conftest import is_postgres

pytestmark = pytest.mark.django_db

SESSIONS, TURNS = 40, 60


@pytest.fixture
def many_turns():
    """SESSIONS sessions of TURNS turns of 4 messages and 2 events each, with the planner's
    statistics; the id of one turn in the middle of one of them."""
    sessions = m.Session.objects.bulk_create([m.Session(agent="ops", key=f"s{i}") for i in range(SESSIONS)])
    turns, messages, events = [], [], []
    for s in sessions:
        for n in range(TURNS):
            turn_id = f"{s.pk:08x}{n:024x}"  # 32 hex digits, as the site's
            turns.append(m.Turn(id=turn_id, session=s, order=n + 1, status="completed", opening=4 * n))
            for k, role in enumerate(("user", "assistant", "tool", "assistant")):
                step = {1: f"model:{4 * n + 1}", 2: f"tool:{4 * n + 1}:c{n}", 3: f"model:{4 * n + 3}"}.get(k)
                messages.append(
                    m.Message(
                        session=s,
                        generation=0,
                        index=4 * n + k,
                        turn_id=turn_id,
                        role=role,
                        step=step,
                        data={"text": "x"},
                    )
                )
            events += [
                m.Event(session=s, generation=0, seq=2 * n + e + 1, turn_id=turn_id, type=kind, data={})
                for e, kind in enumerate(("turn.started", "turn.completed"))
            ]
    m.Turn.objects.bulk_create(turns)
    m.Message.objects.bulk_create(messages, batch_size=500)
    m.Event.objects.bulk_create(events, batch_size=500)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return turns[len(turns) // 2 + 7].id


def _plan(sql: str, params: list, *, prepared: bool = True) -> str:
    """The plan the statement runs: PostgreSQL's generic plan when the store prepares it."""
    with connection.cursor() as cur:
        if is_postgres() and not prepared:  # the ORM's queries are planned with their values
            cur.execute("EXPLAIN " + sql, params)
            return "\n".join(row[0] for row in cur.fetchall())
        if is_postgres():
            cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")  # a prepared statement after 5 uses
            cur.execute(f"PREPARE rows_of_turn AS {wire.numbered(sql).decode()}")
            try:
                cur.execute(f"EXPLAIN EXECUTE rows_of_turn({', '.join(['%s'] * len(params))})", params)
                return "\n".join(row[0] for row in cur.fetchall())
            finally:
                cur.execute("DEALLOCATE rows_of_turn")
        cur.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join(row[-1] for row in cur.fetchall())


def _by_keys(name: str, plan: str) -> None:
    """No scan of the message or event table (the step table holds a few rows: answers,
    compactions; its own unique index serves it once it has more)."""
    for table in ("sessions_app_message", "sessions_app_event"):
        if is_postgres():
            assert f"Seq Scan on {table}" not in plan, f"{name}:\n{plan}"
        else:
            assert not [line for line in plan.splitlines() if line.startswith(("SCAN m", f"SCAN {table}"))], (
                f"{name}:\n{plan}"
            )


def test_the_step_memo_and_the_guard_read_a_turns_messages_by_the_key(many_turns):
    turn_id = many_turns
    if is_postgres():
        # a unit's opening statement, with its guard (its numbered parameters as ``%s`` again)
        unit = unit_sql.unit_statement(checkpoint.fence_sql(turn_id, "a", {"phase": "x"}, 9)[0], "lock turn", 1, 2)
        ref = m.turn_ref(turn_id)
        statements = {
            "steps": (reads.STEPS_PG, [turn_id, turn_id]),
            "the claim's load": (
                opening.CLAIM.decode(),
                ["running", "w", 31.0, "attempt", None, turn_id, "running", "running", 2.0, "running", "running"]
                + [None, None, 0, 0, 0],
            ),
            "the claim's load, under its lock": (
                opening.CLAIM_LOCKED.decode(),
                [turn_id, "running", "w", 31.0, "attempt", None, turn_id, "running", "running", 2.0, "running"]
                + ["running", None, None, 0, 0, 0],
            ),
            "step guard": (
                re.sub(r"\$\d+", "%s", unit.decode()),
                [turn_id, "x", 9, turn_id, "a", ref, "model:1", "tool:1:c", ref, None, 9, "user", "{}", None]
                + [turn_id, "a"],
            ),
        }
    else:
        statements = {
            "steps": (reads.STEPS, [turn_id, turn_id]),
            "step guard": checkpoint.fence_sql(turn_id, "attempt", {"phase": "x"}, None, ("model:1", "tool:1:c")),
        }
    for name, (sql, params) in statements.items():
        plan = _plan(sql, params)
        _by_keys(name, plan)
        assert "sessions_app_message_pkey" in plan or "PRIMARY KEY" in plan or "sqlite_autoindex" in plan, (
            f"{name}:\n{plan}"
        )


def test_the_consoles_read_a_turns_rows_by_the_keys(many_turns):
    turn = m.Turn.objects.get(pk=many_turns)
    assert sorted(selectors.step_keys(turn.pk)) == sorted(
        turn.written().exclude(step=None).values_list("step", flat=True)
    )
    assert turn.written().count() == 4 and turn.logged().count() == 2
    parked_at = m.Event.objects.filter(
        session_id=OuterRef("session_id"),
        generation=OuterRef("generation"),
        turn_id=m.AsTurnRef(OuterRef("pk")),
        type="input.requested",
    )
    queries = {
        "written": turn.written().filter(step__isnull=False),
        "logged": turn.logged().order_by("seq"),
        "parked requests": m.Turn.objects.filter(pk=turn.pk).annotate(parked=parked_at.values("seq")[:1]),
    }
    for name, qs in queries.items():
        sql, params = qs.query.sql_with_params()
        _by_keys(name, _plan(sql, list(params), prepared=False))
