"""A checkpoint on PostgreSQL: every statement of the unit in ONE round trip (``wire.Batch``),
with the fence, the guards and the numbering done inside the server (``checkpoint`` holds what
both backends share: the fence's SQL, the folded steps, the session status statement;
``unit_sql`` the statements themselves)."""

from __future__ import annotations

from typing import Any, Generator

import psycopg
from django.conf import settings
from django.db import IntegrityError, connection
from django.utils import timezone

from agents_app.runtime import events as ev
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import FINAL_STATUSES, LoggedEvent
from sessions_app import models
from sessions_app.store import child_reports, eventlog, transcripts, wire
from sessions_app.store.checkpoint import (
    IDLE,
    INTRANS,
    LEASE_LOST,
    STEP_RECORDED,
    Written,
    dumps,
    fence_raising_sql,
    fence_sql,
    folded,
    handed_over,
    opening_of,
    row_json,
    session_status_params,
    stale_error,
)
from sessions_app.store.unit_sql import (
    ASYNC_COMMIT,
    INSERT_STEP,
    MOVE_BOUNDARY,
    NEXT_IN_CHAIN_PG,
    ROWS_PER_INSERT,
    SESSION_STATUS_BY_ID,
    SESSION_STATUS_BY_TURN,
    STATUS_AND_EVENT_SEQ_BY_ID,
    STATUS_AND_EVENT_SEQ_SQL,
    insert_events_sql,
    insert_messages_sql,
    known_ref,
    numbered_events_sql,
    unit_statement,
)


def write(
    turn_id: str,
    attempt_id: str | None,
    changes: dict[str, Any],
    messages: list[tuple[int, Message]],
    steps: list[tuple[str, int | None, Any]],
    events: list[ev.TurnEvent],
    boundary: tuple[int, int] | None = None,
    result: dict[str, Any] | None = None,
) -> Written:
    """Inside the unit's transaction on Django's PostgreSQL connection (a sync tool's writes are
    in it; SQLite's is ``lite.write_inside``, ``write_plain`` on the sqlite3 connection under it).
    ``boundary``: (boundary, summary index) the unit moves the session's boundary to.
    ``result``: the turn settles for good; a child reports it to its parent (``children``)."""
    # the unit's own atomic block is the outermost one: the checkpoint may end its transaction
    ends = len(connection.atomic_blocks) == 1
    with connection.wrap_database_errors:  # Django's errors, as the tool's ORM writes raise them
        return write_postgresql(
            connection.connection,
            turn_id,
            attempt_id,
            changes,
            messages,
            steps,
            events,
            ends_transaction=ends,
            boundary=boundary,
            result=result,
        )


def write_postgresql(
    raw: psycopg.Connection,
    turn_id: str,
    attempt_id: str | None,
    changes: dict[str, Any],
    messages: list[tuple[int, Message]],
    steps: list[tuple[str, int | None, Any]],
    events: list[ev.TurnEvent],
    *,
    ends_transaction: bool = True,
    boundary: tuple[int, int] | None = None,
    result: dict[str, Any] | None = None,
) -> Written:
    """``write_steps`` on ``raw``, on this thread."""
    return wire.drive(
        raw,
        write_steps(
            turn_id,
            attempt_id,
            changes,
            messages,
            steps,
            events,
            status=raw.pgconn.transaction_status,
            ends_transaction=ends_transaction,
            boundary=boundary,
            result=result,
        ),
    )


def write_steps(
    turn_id: str,
    attempt_id: str | None,
    changes: dict[str, Any],
    messages: list[tuple[int, Message]],
    steps: list[tuple[str, int | None, Any]],
    events: list[ev.TurnEvent],
    *,
    status: Any = None,
    ends_transaction: bool = True,
    boundary: tuple[int, int] | None = None,
    result: dict[str, Any] | None = None,
) -> Generator[wire.Batch, Any, Written]:
    """The whole checkpoint in ONE round trip: a ``wire.Batch`` of prepared statements (a unit
    for ``wire.drive``, or ``pipes.Pipe.drive`` on the event loop). ``status``: the
    connection's transaction status (IDLE when None: a pipe's connection never has one open).

    It runs on Django's connection inside the unit's atomic block (a sync tool's unit), or on the
    store's own (``direct``, ``pipes``) for a unit that runs no tool code. With no
    transaction open the batch is its own transaction, committed at its Sync; after a sync tool's
    writes it ends with COMMIT. Inside an enclosing atomic block (``ends_transaction=False``) it
    ends nothing: the enclosing block commits or rolls back.

    The batch opens with ONE statement (``unit_sql.unit_statement``) that locks the turn's session
    row first (the store's lock order, which the host operations follow too: the numbering of the
    unit's events, which updates that row, or a lock of its own), then fences the turn, guards
    its steps and inserts its first messages and events, reading the turn's session and
    generation from the fence's row; the statements after it (a status recomputed, more rows)
    read them from the turn's row, or, when this process knows them (the attempt's claim read
    them: ``transcripts.facts``), take them as parameters. The fence raises inside the server
    when the attempt lost its lease (``june_lease_lost``), before anything is inserted: the rest
    of the batch is skipped, COMMIT included, and everything rolls back, the tool's writes
    included.
    """
    now = timezone.now()
    k = len(events)
    batch = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
    status = IDLE if status is None else status
    if not ends_transaction and status == IDLE:  # not ours to commit at the Sync
        batch.add(b"BEGIN")
    transaction_status, status = status, "status" in changes
    # the turn's session and generation, when this process read them (its claim): then the
    # statements take them as parameters and read no turn row for them (they never change)
    facts = transcripts.facts(turn_id)
    known = facts is not None
    session: list[Any] = [facts[0], facts[1]] if facts is not None else []
    target = session[0] if known else turn_id  # how the session's statements find its row
    ref = known_ref(turn_id)
    # the unit's events, ROWS_PER_INSERT a statement. The session's row first: numbering the
    # events locks it as a lock of its own would, so a unit whose session status stays as it is
    # numbers them (and inserts the first ones) in its opening statement; one that recomputes the
    # status does it in a statement after the fence's (the status reads the turn's new one)
    numbers = not status and bool(events)
    first = min(k, ROWS_PER_INSERT)
    opening_events: list[Any] = []
    numbered: list[Any] = []
    rest: list[tuple[int, list[Any]]] = []
    for start in range(0, k, ROWS_PER_INSERT):
        params: list[Any] = [] if numbers and not start else [k, start]
        for e in events[start : start + ROWS_PER_INSERT]:
            column = e.turn_id or turn_id
            data = eventlog.stored(e, messages, column)
            bound = known_ref(column) if (numbers or known) and not start else column
            params += [bound, models.event_type_code(e.type), dumps(data), None if eventlog.refers(data) else now]
        if start:
            rest.append((min(ROWS_PER_INSERT, k - start), [*params, turn_id]))
        elif numbers:
            opening_events = [k, *params]
        else:
            numbered = [*session, *params] if known else [*params, turn_id]
    keys, steps = folded(messages, steps)
    if len(set(keys.values())) < len(keys):  # twice in this unit (SQLite's guard sees its own rows)
        raise IntegrityError(f"turn {turn_id}: a step of {sorted(keys.values())} is already recorded")
    rows = [row_json(m, turn_id) for _, m in messages]
    # the unit's opening statement: the session's row, the fence, the step guard (JUNE3 before any
    # insert when the turn holds one of the unit's folded steps already), the first
    # ROWS_PER_INSERT messages and, numbering, the first events (``unit_sql.unit_statement``)
    opens = f"{'number' if numbers else 'lock'} {'session' if known else 'turn'}"
    fence_update, fence_params = fence_sql(turn_id, attempt_id, changes, opening_of(messages))
    params = [*([k] if numbers else []), target, *fence_params]
    if keys:
        params += [ref, *keys.values()]
    chunk = range(min(ROWS_PER_INSERT, len(messages)))
    if messages:
        params += [ref, now]
        for j in chunk:
            i, m = messages[j]
            params += [i, str(m.role), rows[j], keys.get(i)]
    sql = unit_statement(fence_update, opens, len(chunk), len(keys), first if numbers else 0)
    fence = seq = batch.add(sql, [*params, *opening_events, turn_id, attempt_id])
    writer = [*session, ref] if known else []
    for start in range(ROWS_PER_INSERT, len(messages), ROWS_PER_INSERT):  # the rest of the messages
        more = range(start, min(start + ROWS_PER_INSERT, len(messages)))
        params = [*writer, now]
        for j in more:
            i, m = messages[j]
            params += [i, str(m.role), rows[j], keys.get(i)]
        batch.add(insert_messages_sql(len(more), known), params if known else [*params, turn_id])
    for key, idx, data in steps:
        batch.add(INSERT_STEP, [key, idx, dumps(data) if data is not None else None, now, turn_id])
    final = changes.get("status") in FINAL_STATUSES
    if events and status:  # numbered by the session's row, whose status the same UPDATE recomputes
        # and a unit that settles the turn for good reads the chain's next turn in it (the
        # turn's own status moved by the fence before it; the statements after it touch no turn
        # of this session)
        numbering = session_status_params(target, now, events=k)
        seq = batch.add(
            numbered_events_sql(
                STATUS_AND_EVENT_SEQ_BY_ID if known else STATUS_AND_EVENT_SEQ_SQL, first, chain=final, known=known
            ),
            [*numbering, *numbered, *([target] if final else [])],
        )
    for count, params in rest:
        batch.add(insert_events_sql(count), params)
    if boundary is not None:
        batch.add(MOVE_BOUNDARY, [*boundary, turn_id])
    if status and not events:
        batch.add(SESSION_STATUS_BY_ID if known else SESSION_STATUS_BY_TURN, session_status_params(target, now))
    # a child's report to its parent; none for a turn this process knows has no parent (its claim)
    report = (
        batch.add(child_reports.REPORT_PG, child_reports.report_pg_params(turn_id, result))
        if result is not None and (facts is None or facts[2] is not None)
        else None
    )
    nxt = batch.add(NEXT_IN_CHAIN_PG, [turn_id]) if final and not events else None
    if ends_transaction and transaction_status == INTRANS:  # a sync tool's writes began it
        batch.add(b"COMMIT")
    try:
        results = yield batch
    except psycopg.Error as exc:
        if exc.sqlstate == LEASE_LOST:
            raise stale_error(turn_id, attempt_id) from None
        if exc.sqlstate == STEP_RECORDED:
            raise IntegrityError(str(exc.diag.message_primary)) from None
        raise
    row = results[fence]
    cancel_reason, session_id, generation = wire.value(row, 0), wire.number(row, 1), wire.number(row, 2)
    logged: list[LoggedEvent] = []
    if events:
        c = 4 if numbers else 0  # the opening statement's columns after the fence's, or the status's
        last, live = wire.number(results[seq], c), wire.number(results[seq], c + 1)
        if live == generation:  # archived generations are not watched live
            at = now.isoformat()
            logged = [LoggedEvent(last - k + 1 + n, e, at) for n, e in enumerate(events)]
    woken = child_reports.woken_pg(results[report]) if report is not None else []
    head = (results[nxt], 0) if nxt is not None else (results[seq], 2) if final else None
    if head is not None and head[0].ntuples:
        handed = handed_over([wire.value(head[0], c) for c in range(head[1], head[1] + 4)])
        for next_turn, _ in handed:  # its load will look for this session's transcript
            transcripts.remember(next_turn, session_id, generation)
        woken += handed
    return Written(cancel_reason, session_id, generation, logged, woken, rows)


def send_journal(raw: psycopg.Connection, turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
    """The journal write on PostgreSQL: sent on ``raw`` (the store's own connection) without
    waiting. It lands before the next batch on ``raw``, which reads its answer; a refusal is
    logged there, and that batch's own fence refuses the attempt. It does not wait for the WAL
    flush either: a crash that loses it leaves the journal at before_provider, from which
    recovery re-drives the same model step anyway."""
    batch = journal_batch(turn_id, attempt_id, changes)
    batch.conn = raw
    batch.defer()


def journal_batch(turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> wire.Batch:
    """``send_journal``'s batch (a pipe sends it the same way: ``pipes.Pipe.defer``)."""
    sql, params = fence_raising_sql(turn_id, attempt_id, changes)
    batch = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
    batch.add(ASYNC_COMMIT)  # for this batch's transaction only
    batch.add(wire.numbered(sql), params)
    return batch
