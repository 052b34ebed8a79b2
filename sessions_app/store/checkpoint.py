"""Writing one checkpoint: the fence, the transcript rows, the step memo and the events.

Two shapes, one result. On PostgreSQL every statement goes in one round trip (``wire.Batch``,
``checkpoint_pg``), so a step costs less than one small transaction of separate statements. On
SQLite (in-process: no round trips) it is a few plain statements (here). A fence that matched no row raises
StaleAttemptError and the whole unit rolls back, a sync tool's writes included.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, connections
from django.utils import timezone
from psycopg.pq import TransactionStatus

from agents_app.runtime import rules
from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import LoggedEvent, SessionRef, SessionStatus, TurnStatus
from sessions_app import models
from sessions_app.store import jsontext

IDLE = TransactionStatus.IDLE
INTRANS = TransactionStatus.INTRANS
LEASE_LOST = "JUNE1"  # SQLSTATE of june_lease_lost()
STEP_RECORDED = "JUNE3"  # SQLSTATE of june_step_recorded()

#: columns a unit of work may set on its turn (Tx.journal / Tx.settle)
TURN_COLUMNS = frozenset({"phase", "journal", "status", "text", "error", "pending", "usage", "ended_at", "waiting"})


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
    #: a parent this unit's child woke (``child_reports``); the next turn of the session's chain, when
    #: this unit settled its turn for good (``NEXT_IN_CHAIN``)
    runnable: list[tuple[str, SessionRef]] = field(default_factory=list)
    #: the JSON rows of the unit's messages, as written (``row_json``), in order
    rows: list[str] = field(default_factory=list)


def stale_error(turn_id: str, attempt_id: str | None) -> StaleAttemptError:
    return StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} no longer owns the lease")


def recorded_error(turn_id: str, steps: tuple[str, ...]) -> IntegrityError:
    return IntegrityError(f"turn {turn_id}: a step of {sorted(steps)} is already recorded")


def fence_sql(
    turn_id: str,
    attempt_id: str | None,
    changes: dict[str, Any],
    opening: int | None = None,
    held: tuple[str, ...] = (),
    returning: str = "",
) -> tuple[str, list[Any]]:
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


#: the turn's session row locked (``FOR NO KEY UPDATE``) by a unit's opening statement that numbers
#: no events (``unit_sql.unit_statement``) and by a claim's: by the session's key, or by the turn's
LOCKED_SESSION = {
    "session": "SELECT 1 FROM sessions_app_session WHERE id = %s::bigint FOR NO KEY UPDATE",
    "turn": "SELECT 1 FROM sessions_app_session WHERE id = (SELECT session_id FROM sessions_app_turn "
    "WHERE id = %s::text) FOR NO KEY UPDATE",
}


def fence_raising_sql(
    turn_id: str, attempt_id: str | None, changes: dict[str, Any], opening: int | None = None
) -> tuple[str, list[Any]]:
    """The fence as one statement that returns (cancel_reason, session_id, generation) or, when
    it matched no row, raises ``june_lease_lost`` (SQLSTATE JUNE1; migration 0002_database): a
    journal's (``checkpoint_pg.journal_batch``). A unit's fence is part of its opening statement
    (``unit_sql.unit_statement``)."""
    update, params = fence_sql(turn_id, attempt_id, changes, opening)
    return (
        f"WITH f AS ({update} RETURNING cancel_reason, session_id, generation) "
        "SELECT f.cancel_reason, f.session_id, f.generation, "
        "CASE WHEN f.session_id IS NULL THEN june_lease_lost(%s::text, %s::text) END "
        "FROM (SELECT 1) AS one LEFT JOIN f ON true",
        [*params, turn_id, attempt_id],
    )


def plain_now() -> Any:
    """Now, as the driver takes a DateTimeField (Django's adaptation: a UTC string on SQLite;
    no database access, so any thread may call it). Written out when the adaptation is the
    naive UTC time's ``str`` (``_utc_strings``): Django's costs a few microseconds a call, and
    so do ``replace`` and ``str`` of a datetime (20k instructions a unit), so the second's text
    is made once a second and the microseconds added to it, as ``str`` writes them (none
    when they are 0)."""
    if _utc_strings():
        return utc_string(time.time_ns() // 1000)
    if _as_is():
        return timezone.now()
    return connection.ops.adapt_datetimefield_value(timezone.now())


def iso_of(now: Any) -> str:
    """``plain_now``'s value as ISO 8601 with its zone (what an event's frame carries as ``at``)."""
    if isinstance(now, str):  # SQLite's naive UTC text
        return now.replace(" ", "T", 1) + "+00:00"
    return (now if now.tzinfo is not None else now.replace(tzinfo=UTC)).isoformat()


#: (the second, its text) that ``utc_string`` made last (one tuple: threads read it whole)
_second: tuple[int, str] = (-1, "")


def utc_string(micros: int) -> str:
    """``str`` of the naive UTC datetime ``micros`` microseconds after the epoch."""
    global _second
    seconds, fraction = divmod(micros, 1_000_000)
    held, text = _second
    if held != seconds:
        text = str(datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None))
        _second = (seconds, text)
    return f"{text}.{fraction:06d}" if fraction else text


@functools.cache
def _utc_strings() -> bool:
    """Whether Django's SQLite adaptation of an aware datetime is ``str`` of it made naive in
    UTC: SQLite, USE_TZ, and the connection's time zone UTC (no TIME_ZONE of its own)."""
    wrapper = connections["default"]
    return wrapper.vendor == "sqlite" and settings.USE_TZ and wrapper.timezone == UTC


@functools.cache
def _as_is() -> bool:
    """Whether Django's adaptation of a datetime is the datetime itself (PostgreSQL's). Then
    ``plain_now`` asks no connection: on a runner's loop ``connection`` is a new wrapper in each
    turn's task (asgiref's context-local connections), built on its first use."""
    return connections["default"].vendor == "postgresql"


def folded(
    messages: list[tuple[int, Message]], steps: list[tuple[str, int | None, Any]]
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
#: PostgreSQL the unit's opening statement raises (JUNE3, ``unit_sql.unit_statement``).
STEP_HELD = (
    "SELECT 1 FROM sessions_app_message m WHERE m.session_id = sessions_app_turn.session_id "
    'AND m.generation = sessions_app_turn.generation AND m."index" >= sessions_app_turn.opening '
    "AND m.turn_id = sessions_app_turn.id AND m.step IN ({steps})"
)


def stored_ref(turn_id: str | None) -> Any:
    """A turn id as a statement binds it to a message's or an event's ``turn_id`` column
    (``models.TurnRefField``: bytes on PostgreSQL)."""
    return models.turn_ref(turn_id) if turn_id is not None and _binary_refs() else turn_id


@functools.cache
def _binary_refs() -> bool:
    return connections["default"].vendor == "postgresql"


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
    f'AND n.status {IN_CHAIN} ORDER BY n."order" LIMIT 1'
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
    checkpoint's events too (``event_seq``, as ``checkpoint_pg.BUMP_EVENT_SEQ_SQL``): one row update, not two,
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
    return [
        now,
        str(SessionStatus.SUSPENDED),
        str(SessionStatus.RUNNING),
        str(SessionStatus.IDLE),
        str(SessionStatus.NEW),
        *([] if events is None else [events]),
        target,
    ]
