"""Writing one checkpoint: the fence, the transcript rows, the step memo and the events.

Two shapes, one result. On PostgreSQL every statement goes in one pipelined round trip, so a
step costs about what one small transaction costs. Elsewhere (SQLite, in-process: no network)
it is a few plain statements. Both run inside the unit's transaction; a fence that matched no
row raises StaleAttemptError and the caller rolls the whole unit back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agents_app.runtime import events as ev
from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import LoggedEvent

#: columns a unit of work may set on its turn (Tx.journal / Tx.settle)
TURN_COLUMNS = frozenset({"phase", "journal", "status", "text", "error", "pending", "usage"})


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


@dataclass(slots=True)
class Written:
    cancel_reason: str | None
    session_id: int
    generation: int
    events: list[LoggedEvent]


def _stale(turn_id: str, attempt_id: str | None) -> StaleAttemptError:
    return StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} no longer owns the lease")


def fence_sql(turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> tuple[str, list[Any]]:
    assert set(changes) <= TURN_COLUMNS, changes
    sets = ["revision = revision + 1"] + [f"{column} = %s" for column in changes]
    where = "id = %s AND attempt_id = %s" if attempt_id is not None else "id = %s"
    params = [*changes.values(), turn_id] + ([attempt_id] if attempt_id is not None else [])
    return f"UPDATE sessions_app_turn SET {', '.join(sets)} WHERE {where}", params


def write(turn_id: str, attempt_id: str | None, changes: dict[str, Any], messages: list[tuple[int, Message]],
          steps: list[tuple[str, int | None, Any]], events: list[ev.TurnEvent]) -> Written:
    if connection.vendor == "postgresql":
        return _write_postgresql(turn_id, attempt_id, changes, messages, steps, events)
    return _write_plain(turn_id, attempt_id, changes, messages, steps, events)


def _write_plain(turn_id, attempt_id, changes, messages, steps, events) -> Written:
    fence, params = fence_sql(turn_id, attempt_id, changes)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    with connection.cursor() as cur:
        cur.execute(fence + " RETURNING cancel_reason, session_id, generation", params)
        row = cur.fetchone()
        if row is None:
            raise _stale(turn_id, attempt_id)
        cancel_reason, session_id, generation = row
        if messages:
            cur.executemany(
                'INSERT INTO sessions_app_message (session_id, generation, "index", turn_id, role, data, created_at)'
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(session_id, generation, i, turn_id, str(m.role), dumps(m.to_json()), now) for i, m in messages],
            )
        if steps:
            cur.executemany(
                "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) VALUES (%s, %s, %s, %s, %s)",
                [(turn_id, key, idx, dumps(data) if data is not None else None, now) for key, idx, data in steps],
            )
    logged = log_events(session_id, events, turn_id=turn_id, generation=generation)
    return Written(cancel_reason, session_id, generation, logged)


def _preparing(raw: Any) -> bool:
    """Whether checkpoint statements are prepared on this connection. Django opens psycopg
    connections with prepare_threshold=None, which also ignores an explicit prepare=True; a
    threshold no query reaches keeps the ORM's queries unprepared while these, which ask, are."""
    if not settings.JUNE_PREPARED_CHECKPOINTS:
        return False
    if raw.prepare_threshold is None:
        raw.prepare_threshold = 10**9
    return True


def _write_postgresql(turn_id, attempt_id, changes, messages, steps, events) -> Written:
    """Every statement of the checkpoint in ONE pipelined round trip (psycopg 3 pipeline mode),
    as prepared statements (planning them each time costs more than the round trip): the
    inserts read the turn's session and generation themselves, so nothing waits for the fence's
    answer; a fence that matched no row raises, and the caller rolls everything back."""
    fence, params = fence_sql(turn_id, attempt_id, changes)
    now = timezone.now()
    raw = connection.connection
    k = len(events)
    prepare = _preparing(raw)
    # a stale attempt's inserts must write nothing (not collide with the new owner's rows), so
    # the fence's 0 rows surfaces as StaleAttemptError rather than a unique violation
    owned, own = (" AND t.attempt_id = %s", [attempt_id]) if attempt_id is not None else ("", [])
    with raw.pipeline():
        fence_cur = psycopg.Cursor(raw)  # server-side binding: preparable, unlike Django's
        fence_cur.execute(fence + " RETURNING cancel_reason, session_id, generation", params, prepare=prepare)
        cur = psycopg.Cursor(raw)
        for i, m in messages:
            cur.execute(
                'INSERT INTO sessions_app_message (session_id, generation, "index", turn_id, role, data, created_at) '
                "SELECT t.session_id, t.generation, %s, t.id, %s, %s::jsonb, %s FROM sessions_app_turn t "
                "WHERE t.id = %s" + owned,
                [i, str(m.role), dumps(m.to_json()), now, turn_id, *own], prepare=prepare,
            )
        for key, idx, data in steps:
            cur.execute(
                "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) "
                "SELECT t.id, %s, %s, %s::jsonb, %s FROM sessions_app_turn t WHERE t.id = %s" + owned,
                [key, idx, dumps(data) if data is not None else None, now, turn_id, *own], prepare=prepare,
            )
        if events:
            seq_cur = psycopg.Cursor(raw)
            seq_cur.execute(
                "UPDATE sessions_app_session SET event_seq = event_seq + %s "
                "WHERE id = (SELECT session_id FROM sessions_app_turn t WHERE t.id = %s" + owned + ") "
                "RETURNING event_seq, generation",
                [k, turn_id, *own], prepare=prepare,
            )
            for n, e in enumerate(events):
                cur.execute(
                    "INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at) "
                    "SELECT t.session_id, t.generation, s.event_seq - %s + %s, %s, %s, %s::jsonb, %s "
                    "FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id "
                    "WHERE t.id = %s" + owned,
                    [k, n + 1, e.turn_id or turn_id, e.type, dumps(e.to_json()), now, turn_id, *own],
                    prepare=prepare,
                )
    row = fence_cur.fetchone()
    if row is None:
        raise _stale(turn_id, attempt_id)
    cancel_reason, session_id, generation = row
    logged: list[LoggedEvent] = []
    if events:
        last, live = seq_cur.fetchone()
        if live == generation:  # archived generations are not watched live
            logged = [LoggedEvent(last - k + 1 + n, e) for n, e in enumerate(events)]
    return Written(cancel_reason, session_id, generation, logged)


def write_journal(turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> bool:
    """An advisory journal write (provider_started) outside a checkpoint, fenced. On
    PostgreSQL it does not wait for the WAL flush: a crash that loses it leaves the journal at
    before_provider, from which recovery re-drives the same model step anyway."""
    sql, params = fence_sql(turn_id, attempt_id, changes)
    if connection.vendor != "postgresql":
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return cur.rowcount == 1
    raw = connection.connection
    with transaction.atomic():
        with raw.pipeline():
            raw.execute("SET LOCAL synchronous_commit TO OFF")
            cur = psycopg.Cursor(raw)
            cur.execute(sql, params, prepare=_preparing(raw))
        return cur.rowcount == 1


def log_events(session_id: int, events: list[ev.TurnEvent], *, turn_id: str | None,
               generation: int | None = None) -> list[LoggedEvent]:
    """Number and insert events; a turn of an archived generation logs into its archive (and
    returns nothing to publish: nobody watches an archive live)."""
    if not events:
        return []
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE sessions_app_session SET event_seq = event_seq + %s WHERE id = %s RETURNING event_seq, generation",
            [len(events), session_id],
        )
        last, live_generation = cur.fetchone()
        gen = live_generation if generation is None else generation
        first = last - len(events) + 1
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        cur.executemany(
            "INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [(session_id, gen, first + n, e.turn_id or turn_id, e.type, dumps(e.to_json()), now)
             for n, e in enumerate(events)],
        )
    if gen != live_generation:
        return []
    return [LoggedEvent(first + n, e) for n, e in enumerate(events)]
