"""Writing one checkpoint: the fence, the transcript rows, the step memo and the events.

Two shapes, one result. On PostgreSQL every statement goes in one round trip (``wire.Batch``),
so a step costs less than one small transaction of separate statements. On SQLite (in-process:
no round trips) it is a few plain statements. A fence that matched no row raises
StaleAttemptError and the whole unit rolls back, a sync tool's writes included.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime
from datetime import timezone as dt_timezone
from dataclasses import dataclass, field
from typing import Any, Generator

import psycopg
from psycopg.pq import TransactionStatus
from django.conf import settings
from django.db import IntegrityError, connection, connections
from django.utils import timezone

from agents_app.runtime import events as ev
from agents_app.runtime import rules
from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import FINAL_STATUSES, LoggedEvent, SessionRef, SessionStatus, TurnStatus

from sessions_app import models
from sessions_app.store import children, eventlog, jsontext, transcripts, wire

IDLE = TransactionStatus.IDLE
INTRANS = TransactionStatus.INTRANS
LEASE_LOST = "JUNE1"  # SQLSTATE of june_lease_lost()
STEP_RECORDED = "JUNE3"  # SQLSTATE of june_step_recorded()

#: columns a unit of work may set on its turn (Tx.journal / Tx.settle)
TURN_COLUMNS = frozenset({"phase", "journal", "status", "text", "error", "pending", "usage"})


dumps = jsontext.dumps


def row_json(message: Message, turn_id: str) -> str:
    """A message row's JSON: the message's, less the role and turn id its columns hold (the
    turn id stays, null for none, when the message's is not its writer's). The readers put
    them back (``reads.WHOLE``)."""
    data = message.to_json()
    del data["role"]
    if (message.turn_id or None) == turn_id:
        data.pop("turn_id", None)
    else:
        data["turn_id"] = message.turn_id or None
    return dumps(data)


@dataclass(slots=True)
class Written:
    cancel_reason: str | None
    session_id: int
    generation: int
    events: list[LoggedEvent]
    #: a parent this unit's child woke (``children``); the next turn of the session's chain, when
    #: this unit settled its turn for good (``NEXT_IN_CHAIN``)
    runnable: list[tuple[str, SessionRef]] = field(default_factory=list)
    #: the JSON rows of the unit's messages, as written (``row_json``), in order
    rows: list[str] = field(default_factory=list)


def _stale(turn_id: str, attempt_id: str | None) -> StaleAttemptError:
    return StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} no longer owns the lease")


def _recorded(turn_id: str, steps: tuple[str, ...]) -> IntegrityError:
    return IntegrityError(f"turn {turn_id}: a step of {sorted(steps)} is already recorded")


def fence_sql(turn_id: str, attempt_id: str | None, changes: dict[str, Any],
              opening: int | None = None, held: tuple[str, ...] = (), returning: str = "") -> tuple[str, list[Any]]:
    """``opening``: the position of the first message the unit writes; the turn's first unit
    that writes one records it as the turn's (``Turn.opening``). ``held``: the steps the unit
    folds into its messages, none of which the turn's messages may hold already (``STEP_HELD``,
    SQLite's guard): the fence matches no row then either (``write_plain`` tells which).
    ``returning``: the columns it answers. The statement is made once per shape (a few)."""
    params = list(changes.values())
    if opening is not None:
        params.append(opening)
    params.append(turn_id)
    if attempt_id is not None:
        params.append(attempt_id)
    params += held
    refunds = changes.get("status") in rules.REFUNDS_ATTEMPT
    return _fence(tuple(changes), opening is not None, refunds, attempt_id is not None, len(held), returning), params


@functools.lru_cache(maxsize=64)
def _fence(columns: tuple[str, ...], opening: bool, refunds: bool, attempt: bool, held: int, returning: str) -> str:
    assert set(columns) <= TURN_COLUMNS, columns
    sets = ["revision = revision + 1"] + [f"{column} = %s" for column in columns]
    if opening:
        sets.append("opening = COALESCE(opening, %s)")
    if refunds:  # parking gives its claim back
        sets.append("attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END")
    where = "id = %s AND attempt_id = %s" if attempt else "id = %s"
    if held:
        where += f" AND NOT EXISTS ({STEP_HELD.format(steps=', '.join(['%s'] * held))})"
    return f"UPDATE sessions_app_turn SET {', '.join(sets)} WHERE {where}{returning}"


def fence_raising_sql(turn_id: str, attempt_id: str | None, changes: dict[str, Any],
                      opening: int | None = None) -> tuple[str, list[Any]]:
    """The fence as one statement that returns (cancel_reason, session_id, generation) or, when
    it matched no row, raises ``june_lease_lost`` (SQLSTATE JUNE1; migration 0004)."""
    update, params = fence_sql(turn_id, attempt_id, changes, opening)
    return (
        f"WITH f AS ({update} RETURNING cancel_reason, session_id, generation) "
        "SELECT f.cancel_reason, f.session_id, f.generation, "
        "CASE WHEN f.session_id IS NULL THEN june_lease_lost(%s::text, %s::text) END "
        "FROM (SELECT 1) AS one LEFT JOIN f ON true",
        [*params, turn_id, attempt_id],
    )


def write(turn_id: str, attempt_id: str | None, changes: dict[str, Any], messages: list[tuple[int, Message]],
          steps: list[tuple[str, int | None, Any]], events: list[ev.TurnEvent],
          boundary: tuple[int, int] | None = None, result: dict[str, Any] | None = None) -> Written:
    """Inside the unit's transaction on Django's PostgreSQL connection (a sync tool's writes are
    in it; SQLite's is ``lite.write_inside``, ``write_plain`` on the sqlite3 connection under it).
    ``boundary``: (boundary, summary index) the unit moves the session's boundary to.
    ``result``: the turn settles for good; a child reports it to its parent (``children``)."""
    # the unit's own atomic block is the outermost one: the checkpoint may end its transaction
    ends = len(connection.atomic_blocks) == 1
    return write_postgresql(connection.connection, turn_id, attempt_id, changes, messages, steps, events,
                            ends_transaction=ends, boundary=boundary, result=result)


def plain_now() -> Any:
    """Now, as the driver takes a DateTimeField (Django's adaptation: a UTC string on SQLite;
    no database access, so any thread may call it). Written out when the adaptation is the
    naive UTC time's ``str`` (``_utc_strings``): Django's costs a few microseconds a call, and
    so do ``replace`` and ``str`` of a datetime (20k instructions a unit), so the second's text
    is made once a second and the microseconds added to it, as ``str`` writes them (none
    when they are 0)."""
    if _utc_strings():
        return utc_string(time.time_ns() // 1000)
    return connection.ops.adapt_datetimefield_value(timezone.now())


#: (the second, its text) that ``utc_string`` made last (one tuple: threads read it whole)
_second: tuple[int, str] = (-1, "")


def utc_string(micros: int) -> str:
    """``str`` of the naive UTC datetime ``micros`` microseconds after the epoch."""
    global _second
    seconds, fraction = divmod(micros, 1_000_000)
    held, text = _second
    if held != seconds:
        text = str(datetime.fromtimestamp(seconds, dt_timezone.utc).replace(tzinfo=None))
        _second = (seconds, text)
    return f"{text}.{fraction:06d}" if fraction else text


@functools.cache
def _utc_strings() -> bool:
    """Whether Django's SQLite adaptation of an aware datetime is ``str`` of it made naive in
    UTC: SQLite, USE_TZ, and the connection's time zone UTC (no TIME_ZONE of its own)."""
    wrapper = connections["default"]
    return wrapper.vendor == "sqlite" and settings.USE_TZ and wrapper.timezone == dt_timezone.utc


def folded(messages: list[tuple[int, Message]], steps: list[tuple[str, int | None, Any]]
           ) -> tuple[dict[int, str], list[tuple[str, int | None, Any]]]:
    """(the step key each message carries, the steps left for Step rows): a step that holds no
    data and points at a message of its unit is recorded in that message's row (its ``step``
    column; one step a message), so a step costs no row and no index entry of its own. The
    rest (answers, compactions, a step pointing at no message of its unit) are Step rows."""
    if not messages or not steps:
        return {}, steps
    unit = {i for i, _ in messages}
    keys: dict[int, str] = {}
    rest = []
    for key, idx, data in steps:
        if data is None and idx in unit and idx not in keys:
            keys[idx] = key
        else:
            rest.append((key, idx, data))
    return keys, rest


def opening_of(messages: list[tuple[int, Message]]) -> int | None:
    """The first position a unit writes: the turn's opening, if the turn has none yet."""
    return min(i for i, _ in messages) if messages else None


#: a step is recorded once (``message_step``'s uniqueness, without its index): the turn's messages,
#: from its opening on by the message table's key, hold none of a unit's folded steps. Read
#: under the session's row lock (a unit's first statement): no other unit of the turn writes
#: meanwhile. On SQLite the fence's condition (``fence_sql``), on the row it updates, before its
#: messages are inserted (a unit folds a step once: ``write_plain`` checks its own); on
#: PostgreSQL a statement of the batch raises (JUNE3, ``step_guard_sql``).
STEP_HELD = ('SELECT 1 FROM sessions_app_message m WHERE m.session_id = sessions_app_turn.session_id '
             'AND m.generation = sessions_app_turn.generation AND m."index" >= sessions_app_turn.opening '
             "AND m.turn_id = sessions_app_turn.id AND m.step IN ({steps})")
STEP_HELD_PG = ('SELECT {select} FROM sessions_app_turn t JOIN sessions_app_message m ON m.session_id = t.session_id '
                'AND m.generation = t.generation AND m."index" >= t.opening WHERE t.id = {turn} AND m.turn_id = {ref} '
                "AND m.step {step}")
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


@functools.lru_cache(maxsize=8)
def step_guard_sql(count: int) -> bytes:
    """PostgreSQL's guard (``STEP_HELD``) for a unit that folds ``count`` steps: raises if the
    turn holds one already."""
    steps = ", ".join(["%s::text"] * count)
    return wire.numbered(STEP_HELD_PG.format(select="june_step_recorded(t.id, m.step)", turn="%s::text",
                                          ref="june_tid(t.id)", step=f"IN ({steps})") + " LIMIT 1")


def stored_ref(turn_id: str | None) -> Any:
    """A turn id as a statement binds it to a message's or an event's ``turn_id`` column
    (``models.TurnRefField``: bytes on PostgreSQL)."""
    return models.turn_ref(turn_id) if turn_id is not None and _binary_refs() else turn_id


@functools.cache
def _binary_refs() -> bool:
    return connections["default"].vendor == "postgresql"


def write_plain(cur: Any, turn_id, attempt_id, changes, messages, steps, events, boundary=None,
                result=None) -> Written:
    """The checkpoint as plain statements on ``cur``, inside the unit's transaction: Django's
    cursor (SQLite, on Django's thread), or the store's own SQLite connection (``lite``), whose
    cursor takes the same ``%s`` statements."""
    keys, steps = folded(messages, steps)
    held = tuple(keys.values())
    if len(set(held)) != len(held):  # the guard reads the rows written before the unit's
        raise _recorded(turn_id, held)
    # the fence answers what the rest needs of the turn's row (a child's report reads no more),
    # unless this process knows the row's fixed facts and the unit logs events: then the
    # events' numbering answers the cancel request (a RETURNING costs SQLite a temporary b-tree)
    known = transcripts.facts(turn_id) if events else None
    fence, params = fence_sql(turn_id, attempt_id, changes, opening_of(messages), held,
                              "" if known else " RETURNING cancel_reason, session_id, generation, parent_id, spawn_step")
    now = plain_now()
    cur.execute(fence, params)
    if known:
        row = known if cur.rowcount == 1 else None
    else:
        answer = cur.fetchone()
        row = None if answer is None else answer[1:]
        if answer is not None:
            cancel_reason = answer[0]
            transcripts.remember_facts(turn_id, row)
    if row is None:  # the rest rolls back with the unit
        if held and cur.execute(*still_held(turn_id, attempt_id)).fetchone():
            raise _recorded(turn_id, held)
        raise _stale(turn_id, attempt_id)
    session_id, generation, parent_id, spawn_step = row
    rows = [row_json(m, turn_id) for _, m in messages]
    if messages:
        ref = stored_ref(turn_id)
        cur.executemany(INSERT_MESSAGE_PLAIN, [
            (session_id, generation, i, ref, str(m.role), text, keys.get(i), now)
            for (i, m), text in zip(messages, rows)
        ])
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
        cur.execute(SESSION_STATUS_EVENT_SEQ if status else BUMP_EVENT_SEQ_BARE,
                    session_status_params(session_id, now, events=len(events)) if status
                    else [len(events), session_id])
        if known:
            cur.execute(EVENT_SEQ_CANCEL, [turn_id, session_id])
            last, live, cancel_reason = cur.fetchone()
        else:
            cur.execute(EVENT_SEQ_OF, [session_id])
            last, live = cur.fetchone()
        logged = insert_events(cur, session_id, events, last, live, turn_id=turn_id, generation=generation,
                               unit=messages, now=now)
    else:
        logged = []
        if status:
            cur.execute(SESSION_STATUS_PLAIN, session_status_params(session_id, now))
    woken = (children.report_txn(turn_id, result, cur=cur, now=now, parent=(parent_id, spawn_step))
             if result is not None else [])
    if changes.get("status") in FINAL_STATUSES:
        cur.execute(NEXT_IN_CHAIN, [turn_id])
        woken += handed_over(cur.fetchone())
    return Written(cancel_reason, session_id, generation, logged, woken, rows)


#: the statuses that keep a session's chain waiting (``rules.CHAIN_BLOCKING``; ``lease.CLAIM``)
CHAIN_BLOCKING = models.CHAIN_BLOCKING
#: ``<status column> IN_CHAIN``: the condition of the ``turn_chain`` index, written out as its
#: literals (the statuses are the code's constants), as the planners need it to take that index:
#: PostgreSQL proves the index's condition from constants, not from a prepared statement's
#: parameters, and SQLite from the same terms. With the statuses as parameters, both read all
#: the turns the session ever ran (by its foreign key) to find the few unfinished ones: per step
#: a cost that grows with the session's age.
IN_CHAIN = f"IN ({', '.join(repr(s) for s in CHAIN_BLOCKING)})"
assert all(s.isidentifier() for s in CHAIN_BLOCKING)
#: the head of the turn's session's chain, read by the unit that settles the turn for good: the
#: chain's hand-off. It follows the unit's fence, under the session's row lock, so it sees every
#: turn created before the unit (a creation locks the session row too) and a turn created after
#: it is dispatched by its creator, whose claim then sees this turn settled. The head is read
#: straight from the ``turn_chain`` index (as ``lease.CLAIM`` reads it), whatever the planner
#: believes of the table's size: as a join of the session's turns, SQLite's planner took the
#: foreign key's index and sorted them all; as a join on the head's id, PostgreSQL's generic plan
#: made while the turns were few and never analyzed hashed every turn of the table
NEXT_IN_CHAIN = (
    "SELECT n.id, n.status, s.agent, s.key FROM sessions_app_turn n JOIN sessions_app_session s ON s.id = n.session_id "
    "WHERE n.session_id = (SELECT session_id FROM sessions_app_turn WHERE id = %s) "
    f"AND n.status {IN_CHAIN} ORDER BY n.\"order\" LIMIT 1"
)


def handed_over(row: Any) -> list[tuple[str, SessionRef]]:
    """The next turn to dispatch from ``NEXT_IN_CHAIN``'s row (id, status, agent, key): the head
    of the chain when it is queued (a parked head keeps the chain waiting)."""
    if row is None or row[1] != TurnStatus.QUEUED:
        return []
    return [(row[0], SessionRef(row[2], row[3]))]


def session_status_sql(*, by_turn: bool, events: bool = False, read_back: bool = True) -> str:
    """Recompute a session's status from its turns and messages in one statement, and stamp
    ``updated_at`` (``auto_now`` does not fire on an UPDATE): a turn was created, settled,
    cancelled or answered, which is what the session list orders by. Each EXISTS is an index
    lookup (the session's unfinished turns, its parents parked on children: ``turn_waiting``),
    not a scan of every turn the session ever ran. ``events``: the same UPDATE numbers a
    checkpoint's events too (``event_seq``, as ``BUMP_EVENT_SEQ``): one row update, not two,
    answering the new ``event_seq`` and generation unless ``read_back`` is False (SQLite reads
    them with a SELECT: ``write_plain``)."""
    target = "(SELECT session_id FROM sessions_app_turn WHERE id = %s)" if by_turn else "%s"
    bump = ", event_seq = event_seq + %s" if events else ""
    returning = " RETURNING event_seq, generation" if events and read_back else ""
    return (
        "UPDATE sessions_app_session SET updated_at = %s, status = CASE "
        "WHEN EXISTS (SELECT 1 FROM sessions_app_turn t WHERE t.session_id = sessions_app_session.id "
        f"AND t.status = '{TurnStatus.SUSPENDED.value}' AND t.waiting = 0 AND t.generation = sessions_app_session.generation) "
        "THEN %s "
        "WHEN EXISTS (SELECT 1 FROM sessions_app_turn t WHERE t.session_id = sessions_app_session.id "
        f"AND t.status {IN_CHAIN} AND t.status <> '{TurnStatus.SUSPENDED.value}') OR EXISTS (SELECT 1 FROM sessions_app_turn t "
        "WHERE t.session_id = sessions_app_session.id AND t.waiting > 0) THEN %s "
        "WHEN EXISTS (SELECT 1 FROM sessions_app_message mm WHERE mm.session_id = sessions_app_session.id "
        "AND mm.generation = sessions_app_session.generation) THEN %s "
        f"ELSE %s END{bump} WHERE id = {target}{returning}"
    )


def session_status_params(target: Any, now: Any, events: int | None = None) -> list[Any]:
    """``now``: the time as the connection's driver takes it (adapted on SQLite). ``events``:
    how many events the statement numbers (``session_status_sql(events=True)``)."""
    return [now, str(SessionStatus.SUSPENDED), str(SessionStatus.RUNNING), str(SessionStatus.IDLE), str(SessionStatus.NEW),
            *([] if events is None else [events]), target]


SESSION_STATUS_BY_TURN = wire.numbered(session_status_sql(by_turn=True))
STATUS_AND_EVENT_SEQ = wire.numbered(session_status_sql(by_turn=True, events=True))
SESSION_STATUS_PLAIN = session_status_sql(by_turn=False)
INSERT_MESSAGE = wire.numbered(
    'INSERT INTO sessions_app_message (session_id, generation, "index", turn_id, role, data, step, created_at) '
    "SELECT t.session_id, t.generation, %s::integer, june_tid(t.id), %s::text, %s::json, %s::text, %s::timestamptz "
    "FROM sessions_app_turn t WHERE t.id = %s::text"
)
INSERT_STEP = wire.numbered(
    "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) "
    "SELECT t.id, %s::text, %s::integer, %s::jsonb, %s::timestamptz FROM sessions_app_turn t WHERE t.id = %s::text"
)
BUMP_EVENT_SEQ = wire.numbered(
    "UPDATE sessions_app_session SET event_seq = event_seq + %s::integer "
    "WHERE id = (SELECT session_id FROM sessions_app_turn t WHERE t.id = %s::text) "
    "RETURNING event_seq, generation"
)
INSERT_EVENT = wire.numbered(
    "INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at) "
    "SELECT t.session_id, t.generation, s.event_seq - %s::integer + %s::integer, june_tid(%s::text), %s::smallint, %s::json, "
    "%s::timestamptz FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id "
    "WHERE t.id = %s::text"
)
MOVE_BOUNDARY_PLAIN = (
    "UPDATE sessions_app_session SET boundary = %s, summary_index = %s WHERE id = %s AND generation = %s"
)
MOVE_BOUNDARY = wire.numbered(
    "UPDATE sessions_app_session SET boundary = %s::integer, summary_index = %s::integer "
    "FROM sessions_app_turn t WHERE t.id = %s::text AND sessions_app_session.id = t.session_id "
    "AND sessions_app_session.generation = t.generation"
)
NEXT_IN_CHAIN_PG = wire.numbered(NEXT_IN_CHAIN)
ASYNC_COMMIT = b"SELECT set_config('synchronous_commit', 'off', true)"
#: the store's lock order (sessions_app.store): the session row before its turn's (the fence
#: next), as the host operations take them; the event and status updates upgrade this lock
LOCK_SESSION = wire.numbered(
    "SELECT 1 FROM sessions_app_session WHERE id = (SELECT session_id FROM sessions_app_turn WHERE id = %s::text) "
    "FOR NO KEY UPDATE"
)


def write_postgresql(raw: psycopg.Connection, turn_id: str, attempt_id: str | None, changes: dict[str, Any],
                     messages: list[tuple[int, Message]], steps: list[tuple[str, int | None, Any]],
                     events: list[ev.TurnEvent], *, ends_transaction: bool = True,
                     boundary: tuple[int, int] | None = None, result: dict[str, Any] | None = None) -> Written:
    """``write_steps`` on ``raw``, on this thread."""
    return wire.drive(raw, write_steps(turn_id, attempt_id, changes, messages, steps, events,
                                       status=raw.pgconn.transaction_status, ends_transaction=ends_transaction,
                                       boundary=boundary, result=result))


def write_steps(turn_id: str, attempt_id: str | None, changes: dict[str, Any],
                messages: list[tuple[int, Message]], steps: list[tuple[str, int | None, Any]],
                events: list[ev.TurnEvent], *, status: Any = None, ends_transaction: bool = True,
                boundary: tuple[int, int] | None = None,
                result: dict[str, Any] | None = None) -> Generator[wire.Batch, Any, Written]:
    """The whole checkpoint in ONE round trip: a ``wire.Batch`` of prepared statements (a unit
    for ``wire.drive``, or ``pipes.Pipe.drive`` on the event loop). ``status``: the
    connection's transaction status (IDLE when None: a pipe's connection never has one open).

    It runs on Django's connection inside the unit's atomic block (a sync tool's unit), or on the
    store's own (``direct``, ``pipes``) for a unit that runs no tool code. With no
    transaction open the batch is its own transaction, committed at its Sync; after a sync tool's
    writes it ends with COMMIT. Inside an enclosing atomic block (``ends_transaction=False``) it
    ends nothing: the enclosing block commits or rolls back.

    The batch locks the turn's session row first (``LOCK_SESSION``: the store's lock order,
    which the host operations follow too), then fences the turn. The inserts read the turn's
    session and generation themselves, so nothing waits for the fence's answer. The fence raises inside the server when the attempt lost its lease
    (``june_lease_lost``): the rest of the batch is skipped, COMMIT included, and everything
    rolls back, the tool's writes included.
    """
    now = timezone.now()
    k = len(events)
    batch = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
    status = IDLE if status is None else status
    if not ends_transaction and status == IDLE:  # not ours to commit at the Sync
        batch.add(b"BEGIN")
    batch.add(LOCK_SESSION, [turn_id])
    fence_sql_, fence_params = fence_raising_sql(turn_id, attempt_id, changes, opening_of(messages))
    fence = batch.add(wire.numbered(fence_sql_), fence_params)
    keys, steps = folded(messages, steps)
    if len(set(keys.values())) < len(keys):  # twice in this unit (SQLite's guard sees its own rows)
        raise IntegrityError(f"turn {turn_id}: a step of {sorted(keys.values())} is already recorded")
    if keys:  # raises (JUNE3) before the inserts when the turn holds one of these steps already
        batch.add(step_guard_sql(len(keys)), [turn_id, *keys.values()])
    rows = [row_json(m, turn_id) for _, m in messages]
    for (i, m), text in zip(messages, rows):
        batch.add(INSERT_MESSAGE, [i, str(m.role), text, keys.get(i), now, turn_id])
    for key, idx, data in steps:
        batch.add(INSERT_STEP, [key, idx, dumps(data) if data is not None else None, now, turn_id])
    transaction_status, status = status, "status" in changes
    if events:  # numbered by the session's row, whose status the same UPDATE recomputes
        seq = batch.add(STATUS_AND_EVENT_SEQ, session_status_params(turn_id, now, events=k)) if status else \
            batch.add(BUMP_EVENT_SEQ, [k, turn_id])
        for n, e in enumerate(events):
            column = e.turn_id or turn_id
            data = eventlog.stored(e, messages, column)
            batch.add(INSERT_EVENT, [k, n + 1, column, models.event_type_code(e.type), dumps(data),
                                     None if eventlog.refers(data) else now, turn_id])
    if boundary is not None:
        batch.add(MOVE_BOUNDARY, [*boundary, turn_id])
    if status and not events:
        batch.add(SESSION_STATUS_BY_TURN, session_status_params(turn_id, now))
    report = batch.add(children.REPORT_PG, children.report_pg_params(turn_id, result)) if result is not None else None
    final = changes.get("status") in FINAL_STATUSES
    nxt = batch.add(NEXT_IN_CHAIN_PG, [turn_id]) if final else None
    if ends_transaction and transaction_status == INTRANS:  # a sync tool's writes began it
        batch.add(b"COMMIT")
    try:
        results = yield batch
    except psycopg.Error as exc:
        if exc.sqlstate == LEASE_LOST:
            raise _stale(turn_id, attempt_id) from None
        if exc.sqlstate == STEP_RECORDED:
            raise IntegrityError(str(exc.diag.message_primary)) from None
        raise
    row = results[fence]
    cancel_reason, session_id, generation = wire.value(row, 0), int(wire.value(row, 1)), int(wire.value(row, 2))
    logged: list[LoggedEvent] = []
    if events:
        last, live = int(wire.value(results[seq], 0)), int(wire.value(results[seq], 1))
        if live == generation:  # archived generations are not watched live
            logged = [LoggedEvent(last - k + 1 + n, e) for n, e in enumerate(events)]
    woken = children.woken_pg(results[report]) if report is not None else []
    if nxt is not None and results[nxt].ntuples:
        handed = handed_over([wire.value(results[nxt], c) for c in range(4)])
        for next_turn, _ in handed:  # its load will look for this session's transcript
            transcripts.remember(next_turn, session_id, generation)
        woken += handed
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
        raise _stale(turn_id, attempt_id)


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


def log_events(session_id: int, events: list[ev.TurnEvent], *, turn_id: str | None,
               generation: int | None = None, unit: list[tuple[int, Message]] = (),
               cur: Any = None, now: Any = None) -> list[LoggedEvent]:
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
    return insert_events(cur, session_id, events, last, live_generation, turn_id=turn_id, generation=generation,
                         unit=unit, now=now)


#: ``write_plain`` (SQLite): the events' numbering (with the status recompute, or alone) without
#: a RETURNING, then the row read back in the same transaction; with the turn's cancel request
#: when the fence answered nothing (``EVENT_SEQ_CANCEL``: read after the fence, as it reads it)
BUMP_EVENT_SEQ_BARE = "UPDATE sessions_app_session SET event_seq = event_seq + %s WHERE id = %s"
BUMP_EVENT_SEQ_PLAIN = BUMP_EVENT_SEQ_BARE + " RETURNING event_seq, generation"  # ``log_events``
SESSION_STATUS_EVENT_SEQ = session_status_sql(by_turn=False, events=True, read_back=False)
EVENT_SEQ_OF = "SELECT event_seq, generation FROM sessions_app_session WHERE id = %s"
EVENT_SEQ_CANCEL = ("SELECT s.event_seq, s.generation, (SELECT cancel_reason FROM sessions_app_turn WHERE id = %s) "
                    "FROM sessions_app_session s WHERE s.id = %s")


def insert_events(cur: Any, session_id: int, events: list[ev.TurnEvent], last: int, live_generation: int, *,
                  turn_id: str | None, generation: int | None, unit: list[tuple[int, Message]] = (),
                  now: Any = None) -> list[LoggedEvent]:
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
        [(session_id, gen, first + n, stored_ref(column), models.event_type_code(e.type), dumps(data),
          None if eventlog.refers(data) else now)
         for n, (e, column, data) in enumerate(stored)],
    )
    if gen != live_generation:
        return []
    return [LoggedEvent(first + n, e) for n, e in enumerate(events)]

