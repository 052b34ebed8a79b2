"""A checkpoint as plain statements, inside the unit's transaction: on SQLite (the store's own
connection, ``lite``, or Django's cursor on its thread), and the events the host operations log
on Django's connection (``log_events``: a cancel, a reset) on either backend. PostgreSQL's
checkpoint is one round trip instead (``checkpoint_pg``); what both share is in ``checkpoint``."""

from __future__ import annotations

from typing import Any, Sequence, cast

from django.db import connection

from agents_app.runtime import events as ev
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import FINAL_STATUSES, LoggedEvent
from sessions_app import models
from sessions_app.store import child_reports, eventlog, transcripts
from sessions_app.store.checkpoint import (
    NEXT_IN_CHAIN,
    Written,
    dumps,
    fence_sql,
    folded,
    handed_over,
    iso_of,
    opening_of,
    plain_now,
    recorded_error,
    row_json,
    session_status_params,
    session_status_sql,
    stale_error,
    stored_ref,
)

INSERT_MESSAGE_PLAIN = (
    'INSERT INTO sessions_app_message (session_id, generation, "index", turn_id, role, data, step, created_at) '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


def still_held(turn_id: str, attempt_id: str | None) -> tuple[str, list[Any]]:
    """A fence that guarded steps matched no row: does the attempt still hold the turn (then
    a step was held), or was it the lease? The fence's own condition, less the guard."""
    if attempt_id is None:
        return "SELECT 1 FROM sessions_app_turn WHERE id = %s", [turn_id]
    return "SELECT 1 FROM sessions_app_turn WHERE id = %s AND attempt_id = %s", [turn_id, attempt_id]


SESSION_STATUS_PLAIN = session_status_sql(by_turn=False)
MOVE_BOUNDARY_PLAIN = (
    "UPDATE sessions_app_session SET boundary = %s, summary_index = %s WHERE id = %s AND generation = %s"
)


def write_plain(
    cur: Any,
    turn_id: str,
    attempt_id: str | None,
    changes: Any,
    messages: Any,
    steps: Any,
    events: Any,
    boundary: Any = None,
    result: Any = None,
) -> Written:
    """The checkpoint as plain statements on ``cur``, inside the unit's transaction: Django's
    cursor (SQLite, on Django's thread), or the store's own SQLite connection (``lite``), whose
    cursor takes the same ``%s`` statements."""
    keys, steps = folded(messages, steps)
    held = tuple(keys.values())
    if len(set(held)) != len(held):  # the guard reads the rows written before the unit's
        raise recorded_error(turn_id, held)
    # the fence answers what the rest needs of the turn's row (a child's report reads no more),
    # unless this process knows the row's fixed facts and the unit logs events: then the
    # events' numbering answers the cancel request (a RETURNING costs SQLite a temporary b-tree)
    known = transcripts.facts(turn_id) if events else None
    fence, params = fence_sql(
        turn_id,
        attempt_id,
        changes,
        opening_of(messages),
        held,
        "" if known else " RETURNING cancel_reason, session_id, generation, parent_id, spawn_step",
    )
    now = plain_now()
    cur.execute(fence, params)
    if known:
        row = known if cur.rowcount == 1 else None
    else:
        answer = cur.fetchone()
        row = None if answer is None else answer[1:]
        if answer is not None:
            cancel_reason = answer[0]
            transcripts.remember_facts(turn_id, cast(transcripts.Facts, row))  # the fence's four columns
    if row is None:  # the rest rolls back with the unit
        if held and cur.execute(*still_held(turn_id, attempt_id)).fetchone():
            raise recorded_error(turn_id, held)
        raise stale_error(turn_id, attempt_id)
    session_id, generation, parent_id, spawn_step = row
    rows = [row_json(m, turn_id) for _, m in messages]
    if messages:
        ref = stored_ref(turn_id)
        cur.executemany(
            INSERT_MESSAGE_PLAIN,
            [
                (session_id, generation, i, ref, str(m.role), text, keys.get(i), now)
                for (i, m), text in zip(messages, rows)
            ],
        )
    if steps:
        cur.executemany(
            "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) VALUES (%s, %s, %s, %s, %s)",
            [(turn_id, key, idx, dumps(data) if data is not None else None, now) for key, idx, data in steps],
        )
    if boundary is not None:  # only the live generation's: an archived one keeps its own
        cur.execute(MOVE_BOUNDARY_PLAIN, [*boundary, session_id, generation])
    status = "status" in changes
    if events:  # numbered by the session's row, whose status the same UPDATE recomputes
        # read back by a SELECT in the same transaction: SQLite builds a temporary b-tree (a
        # page allocated and zeroed) for an UPDATE's RETURNING, and the row is on a page the
        # UPDATE just wrote
        cur.execute(
            SESSION_STATUS_EVENT_SEQ if status else BUMP_EVENT_SEQ_BARE,
            session_status_params(session_id, now, events=len(events)) if status else [len(events), session_id],
        )
        if known:
            cur.execute(EVENT_SEQ_CANCEL, [turn_id, session_id])
            last, live, cancel_reason = cur.fetchone()
        else:
            cur.execute(EVENT_SEQ_OF, [session_id])
            last, live = cur.fetchone()
        logged = insert_events(
            cur, session_id, events, last, live, turn_id=turn_id, generation=generation, unit=messages, now=now
        )
    else:
        logged = []
        if status:
            cur.execute(SESSION_STATUS_PLAIN, session_status_params(session_id, now))
    woken = (
        child_reports.report_txn(turn_id, result, cur=cur, now=now, parent=(parent_id, spawn_step))
        if result is not None
        else []
    )
    if changes.get("status") in FINAL_STATUSES:
        cur.execute(NEXT_IN_CHAIN, [turn_id])
        woken += handed_over(cur.fetchone())
    return Written(cancel_reason, session_id, generation, logged, woken, rows)


def write_journal(turn_id: str, attempt_id: str | None, changes: dict[str, Any], cur: Any = None) -> None:
    """An advisory journal write (provider_started) outside a checkpoint: one fenced UPDATE
    (StaleAttemptError when it matches no row), on ``cur`` (the store's own SQLite connection,
    ``lite``) or else Django's connection; on PostgreSQL the store uses ``send_journal``."""
    if cur is None:
        with connection.cursor() as cur:
            return write_journal(turn_id, attempt_id, changes, cur)
    sql, params = fence_sql(turn_id, attempt_id, changes)
    cur.execute(sql, params)
    if cur.rowcount != 1:
        raise stale_error(turn_id, attempt_id)


def log_events(
    session_id: int,
    events: list[ev.TurnEvent],
    *,
    turn_id: str | None,
    generation: int | None = None,
    unit: Sequence[tuple[int, Message]] = (),
    cur: Any = None,
    now: Any = None,
) -> list[LoggedEvent]:
    """Number and insert events; a turn of an archived generation logs into its archive (and
    returns nothing to publish: nobody watches an archive live). ``unit``: the messages written
    in the same transaction, which events refer to instead of repeating them (``eventlog``).
    ``cur``, ``now``: the unit's cursor and time (``write_plain``); else Django's connection, now."""
    if not events:
        return []
    if cur is None:
        with connection.cursor() as cur:
            return log_events(session_id, events, turn_id=turn_id, generation=generation, unit=unit, cur=cur, now=now)
    cur.execute(BUMP_EVENT_SEQ_PLAIN, [len(events), session_id])
    last, live_generation = cur.fetchone()
    return insert_events(
        cur, session_id, events, last, live_generation, turn_id=turn_id, generation=generation, unit=unit, now=now
    )


#: ``write_plain`` (SQLite): the events' numbering (with the status recompute, or alone) without
#: a RETURNING, then the row read back in the same transaction; with the turn's cancel request
#: when the fence answered nothing (``EVENT_SEQ_CANCEL``: read after the fence, as it reads it)
BUMP_EVENT_SEQ_BARE = "UPDATE sessions_app_session SET event_seq = event_seq + %s WHERE id = %s"
BUMP_EVENT_SEQ_PLAIN = BUMP_EVENT_SEQ_BARE + " RETURNING event_seq, generation"  # ``log_events``
SESSION_STATUS_EVENT_SEQ = session_status_sql(by_turn=False, events=True, read_back=False)
EVENT_SEQ_OF = "SELECT event_seq, generation FROM sessions_app_session WHERE id = %s"
EVENT_SEQ_CANCEL = (
    "SELECT s.event_seq, s.generation, (SELECT cancel_reason FROM sessions_app_turn WHERE id = %s) "
    "FROM sessions_app_session s WHERE s.id = %s"
)


def insert_events(
    cur: Any,
    session_id: int,
    events: list[ev.TurnEvent],
    last: int,
    live_generation: int,
    *,
    turn_id: str | None,
    generation: int | None,
    unit: Sequence[tuple[int, Message]] = (),
    now: Any = None,
) -> list[LoggedEvent]:
    """Insert ``events``, numbered up to ``last`` (the session's ``event_seq`` once bumped by
    their count), into ``generation`` (None: the live one)."""
    gen = live_generation if generation is None else generation
    first = last - len(events) + 1
    now = now or plain_now()
    unit = list(unit)
    stored = [(e, column, eventlog.stored(e, unit, column)) for e in events for column in [e.turn_id or turn_id]]
    cur.executemany(
        "INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        [
            (
                session_id,
                gen,
                first + n,
                stored_ref(column),
                models.event_type_code(e.type),
                dumps(data),
                None if eventlog.refers(data) else now,
            )
            for n, (e, column, data) in enumerate(stored)
        ],
    )
    if gen != live_generation:
        return []
    at = iso_of(now)
    return [LoggedEvent(first + n, e, at) for n, e in enumerate(events)]
