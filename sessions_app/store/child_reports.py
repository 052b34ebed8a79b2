"""Subagents on the Django database: a child's report to its parent, in the child's final
checkpoint (``agents_app/runtime/subagents.py``; creating children and the cascade of a cancel
are in ``spawning``).

Lock order, added to the store's (a session row before its turns'): a child's session and turn
before its parent's turn. A child's final checkpoint locks its session, fences its turn, then
updates its parent's turn; a cascade locks and updates the deepest children first (each
session, then its turns) and the turns it was asked to cancel last; a spawn locks the parent's
session, creates the children (session, turn), then updates and fences the parent's turn.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.utils import timezone

from agents_app.runtime.seams import SessionRef, TurnStatus
from sessions_app.store import wire


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


#: the report, one statement (PostgreSQL, in the checkpoint's pipeline): store the result under
#: the parent's step once; only when it was stored, count the child off a parent that still
#: waits and queue that parent when it was the last — with a fresh retry budget (``attempts``
#: counts claims; a park ended its attempt well, and a tool spawning 8 children one after the
#: other is claimed 9 times). Returns the woken parent's session.
REPORT_PG = wire.numbered(
    "WITH ins AS (INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) "
    "SELECT c.parent_id, c.spawn_step, NULL, %s::jsonb, %s::timestamptz FROM sessions_app_turn c "
    "JOIN sessions_app_turn p ON p.id = c.parent_id WHERE c.id = %s::text "
    "ON CONFLICT (turn_id, key) DO NOTHING RETURNING turn_id) "
    "UPDATE sessions_app_turn SET waiting = waiting - 1, "
    "status = CASE WHEN waiting = 1 THEN %s::text ELSE status END, "
    "pending = CASE WHEN waiting = 1 THEN NULL ELSE pending END, "
    "attempts = CASE WHEN waiting = 1 THEN 0 ELSE attempts END "
    "WHERE id IN (SELECT turn_id FROM ins) AND status = %s::text AND waiting > 0 "
    "RETURNING id, status, (SELECT s.agent FROM sessions_app_session s WHERE s.id = session_id), "
    "(SELECT s.key FROM sessions_app_session s WHERE s.id = session_id)"
)


def report_pg_params(turn_id: str, result: dict[str, Any]) -> list[Any]:
    return [dumps(result), timezone.now(), turn_id, str(TurnStatus.QUEUED), str(TurnStatus.SUSPENDED)]


def woken_pg(row: Any) -> list[tuple[str, SessionRef]]:
    """The runnable parent from REPORT_PG's result (none, or the parent it queued)."""
    if row is None or not getattr(row, "ntuples", 0):
        return []
    if wire.value(row, 1) != TurnStatus.QUEUED:
        return []
    return [(wire.text(row, 0), SessionRef(wire.text(row, 2), wire.text(row, 3)))]


def report_txn(
    turn_id: str,
    result: dict[str, Any],
    cur: Any = None,
    now: Any = None,
    parent: tuple[str | None, str | None] | None = None,
) -> list[tuple[str, SessionRef]]:
    """The report as plain statements on ``cur`` at ``now`` (the unit's cursor and time on
    SQLite: Django's or the store's own, ``lite``), else on Django's connection (cancels, on
    both databases). ``parent``: the turn's (parent_id, spawn_step), when the caller read them
    (the checkpoint's fence returns them): a turn with no parent then costs no statement."""
    if cur is None:
        with connection.cursor() as cur:
            return report_txn(turn_id, result, cur, now, parent)
    if parent is None:
        cur.execute("SELECT parent_id, spawn_step FROM sessions_app_turn WHERE id = %s", [turn_id])
        parent = cur.fetchone()
    if parent is None or not parent[0]:
        return []
    parent_id: str = parent[0]
    step = parent[1]
    cur.execute(
        "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) "
        "SELECT id, %s, NULL, %s, %s FROM sessions_app_turn WHERE id = %s "
        "ON CONFLICT (turn_id, key) DO NOTHING",
        [step, dumps(result), now or connection.ops.adapt_datetimefield_value(timezone.now()), parent_id],
    )
    if cur.rowcount != 1:
        return []
    cur.execute(
        "UPDATE sessions_app_turn SET waiting = waiting - 1, "
        "status = CASE WHEN waiting = 1 THEN %s ELSE status END, "
        "pending = CASE WHEN waiting = 1 THEN NULL ELSE pending END, "
        "attempts = CASE WHEN waiting = 1 THEN 0 ELSE attempts END "
        "WHERE id = %s AND status = %s AND waiting > 0",
        [str(TurnStatus.QUEUED), parent_id, str(TurnStatus.SUSPENDED)],
    )
    if cur.rowcount != 1:
        return []
    cur.execute(WOKEN, [parent_id, str(TurnStatus.QUEUED)])
    woken = cur.fetchone()
    return [(parent_id, SessionRef(*woken))] if woken else []


#: the parent's session, when the report queued the parent
WOKEN = (
    "SELECT s.agent, s.key FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id "
    "WHERE t.id = %s AND t.status = %s"
)
