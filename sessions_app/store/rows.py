"""Rows to the runtime's records, and the collector a unit of work writes through."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from agents_app.runtime import events as ev
from agents_app.runtime import subagents
from agents_app.runtime.errors import NotFound
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import FINAL_STATUSES, ChildTurn, Phase, SessionRef, TurnInput, TurnRecord, TurnStatus
from sessions_app import models as m
from sessions_app.store import jsontext
from sessions_app.store.checkpoint import dumps, plain_now


def record_of(turn: m.Turn | SimpleNamespace, session: m.Session | SimpleNamespace | None = None) -> TurnRecord:
    s = session or turn.session
    return TurnRecord(
        turn_id=turn.id,
        session=SessionRef(s.agent, s.key),
        status=_STATUSES.get(turn.status) or TurnStatus(turn.status),
        input=TurnInput.from_json(turn.input or {}),
        generation=turn.generation,
        cancel_reason=turn.cancel_reason,
        attempt_id=turn.attempt_id,
        attempts=turn.attempts,
        lease_owner=turn.lease_owner,
        lease_expires=turn.lease_expires_at,
        phase=turn.phase,
        journal=turn.journal or {},
        pending=turn.pending,
        policy=turn.policy,
        text=turn.text or "",
        error=turn.error,
        usage=turn.usage or {},
        parent=turn.parent_id,
        depth=turn.depth,
        waiting=turn.waiting,
    )


#: a status column's value to its member (an enum's call costs more than the lookup)
_STATUSES = {str(status): status for status in TurnStatus}
_TURN_FIELDS = m.Turn._meta.concrete_fields
_SESSION_FIELDS = m.Session._meta.concrete_fields
#: a turn and its session in one statement, written once: the ORM would compile this query
#: afresh at every claim and load (``bench/bench_short.py`` measures a short turn's CPU)
TURN_ROW = (
    "SELECT "
    + ", ".join([f't."{f.column}"' for f in _TURN_FIELDS] + [f's."{f.column}"' for f in _SESSION_FIELDS])
    + f" FROM {m.Turn._meta.db_table} t JOIN {m.Session._meta.db_table} s ON s.id = t.session_id WHERE t.id = %s"
)


@functools.lru_cache(maxsize=16)
def _converters(conn: Any) -> list[tuple[int, Any, list[Any]]]:
    """(column, expression, converters) for each column of ``TURN_ROW`` whose driver value the
    ORM converts on ``conn`` (JSON, and datetimes on SQLite), as its compiler would."""
    out = []
    for n, f in enumerate([*_TURN_FIELDS, *_SESSION_FIELDS]):
        col = f.get_col(f.model._meta.db_table)
        found = conn.ops.get_db_converters(col) + col.get_db_converters(conn)
        if found:
            out.append((n, col, found))
    return out


def turn_row(turn_id: str) -> m.Turn:
    """The turn with its session (``turn.session`` is loaded), as
    ``Turn.objects.select_related("session").get(pk=turn_id)`` returns it, in one statement."""
    conn = connections[DEFAULT_DB_ALIAS]
    with conn.cursor() as cur:
        cur.execute(TURN_ROW, [turn_id])
        row = cur.fetchone()
    if row is None:
        raise NotFound(f"no turn {turn_id}")
    values = list(row)
    for n, col, converters in _converters(conn):
        for convert in converters:
            values[n] = convert(values[n], col, conn)
    k = len(_TURN_FIELDS)
    turn = m.Turn.from_db(conn.alias, None, values[:k])
    m.Turn.session.field.set_cached_value(turn, m.Session.from_db(conn.alias, None, values[k:]))
    return turn


def journal_changes(attempt_id: str | None, phase: Phase, data: dict[str, Any]) -> dict[str, Any]:
    return {"phase": str(phase), "journal": dumps({**data, "attempt_id": attempt_id})}


def loads(value: Any) -> Any:
    return jsontext.loads(value) if isinstance(value, (str, bytes)) else value


class UnitWriter:
    """The Tx of a unit of work: collects its writes; the checkpoint writes them in a handful
    of statements (one round trip on PostgreSQL)."""

    def __init__(self, turn_id: str, attempt_id: str | None) -> None:
        self.turn_id = turn_id
        self.attempt_id = attempt_id
        self.messages: list[tuple[int, Message]] = []
        self.steps: list[tuple[str, int | None, Any]] = []
        self.events: list[ev.TurnEvent] = []
        self.turn_changes: dict[str, Any] = {}
        self.children: list[ChildTurn] = []
        #: what this turn reports to its parent, if it has one, when the unit settles it for good
        self.result: dict[str, Any] | None = None
        #: (boundary, summary index) when a compaction moved the session's boundary
        self.moved: tuple[int, int] | None = None

    def append(self, message: Message, index: int) -> None:
        self.messages.append((index, message))

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        self.steps.append((step_id, index, data))

    def emit(self, event: ev.TurnEvent) -> None:
        self.events.append(event)

    def journal(self, phase: Phase, **data: Any) -> None:
        self.turn_changes.update(journal_changes(self.attempt_id, phase, data))

    def boundary(self, index: int, summary_index: int) -> None:
        self.moved = (index, summary_index)

    def settle(
        self,
        status: TurnStatus,
        *,
        text: str = "",
        error: dict[str, Any] | None = None,
        pending: dict[str, Any] | None = None,
        usage: dict[str, int] | None = None,
        waiting: int | None = None,
    ) -> None:
        self.turn_changes["status"] = str(status)
        self.turn_changes["text"] = text
        self.turn_changes["error"] = dumps(error) if error is not None else None
        self.turn_changes["pending"] = dumps(pending) if pending is not None else None
        if usage is not None:
            self.turn_changes["usage"] = dumps(usage)
        if waiting is not None:
            self.turn_changes["waiting"] = waiting
        if status in FINAL_STATUSES:
            self.turn_changes["ended_at"] = plain_now()  # in the transaction that settles it
            self.result = subagents.result_of(self.turn_id, status, text, error, usage)

    def spawn(self, child: ChildTurn) -> None:
        self.children.append(child)

    def into(self, other: UnitWriter) -> None:
        """Hand what this writer collected to ``other`` (a unit recorded once, written there)."""
        other.messages, other.steps, other.events = self.messages, self.steps, self.events
        other.turn_changes, other.children, other.result = self.turn_changes, self.children, self.result
        other.moved = self.moved
