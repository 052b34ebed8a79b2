"""The store's own SQLite connection, for units of work and reads that run no tool code.

SQLite is in-process: a checkpoint is a few plain statements that take tens of microseconds.
Handing it to asgiref's sync thread (the one that owns Django's connection) costs a thread hop
each way, many times the statements themselves. So on SQLite, as on PostgreSQL (``direct``),
the units that only record what the engine did (``commit``, ``journal``), the turn's reads and
lease calls (``load``, ``get_turn``, ``next_queued``, ``claim``, ``heartbeat``, ``release``)
and the creation of a turn without a replace run on the caller's thread, on a ``sqlite3``
connection of the store's own: one per thread, never shared, opened from Django's settings for
the default database with the same pragmas (``foreign_keys``, then ``OPTIONS["init_command"]``:
WAL, synchronous=NORMAL).

The statements are the ones Django's connection runs (``checkpoint_plain.write_plain``,
``reads.state_of``, ``lease``, ``child_reports.report_txn``), written with ``%s``; this connection's
cursor turns them into ``?`` once (cached), as Django's SQLite cursor does. A write unit opens
with ``BEGIN IMMEDIATE``, as Django's ``transaction_mode=IMMEDIATE`` does: it takes the database's
write lock at its start, so two writers never deadlock on a lock upgrade, and a fence that
matched no row (StaleAttemptError) rolls the whole unit back. SQLite has one write lock for the
whole database, so the store's lock order (session row, then its turns') holds trivially.

The WAL's checkpoints run off the units (``lite_wal``; the connections themselves: ``lite_conn``). SQLite's automatic checkpoint runs
on the connection whose COMMIT takes the WAL past 1,000 pages, inside that unit: it copies the
pages back to the database file and syncs it, and the turn that paid for it took far longer.
Every ``CHECKPOINT_EVERY`` commits here, a thread of the process copies them (a PASSIVE
checkpoint, on a connection of its own: no writer waits for it), and the WAL starts over long
before the automatic checkpoint, which stays as the backstop. Durability is as before (WAL,
synchronous=NORMAL): a checkpoint only moves committed pages, and syncs them wherever it runs.

A load (``load``, ``claim_and_load``) reads only the messages past those this process holds
for the turn's session (``transcripts``); a unit's messages are held once its COMMIT returned.

The loop never waits for another writer. This connection's busy timeout is 0: when another
connection holds the write lock (a worker process, daphne's ORM thread, a sync tool's unit), the
unit rolls back and raises ``Busy`` at once, and the store runs it on the thread path instead
(Django's connection, whose busy timeout is the settings' ``timeout``), which waits off the loop.

What stays on Django's thread and connection: a unit that runs a sync tool (``atomic``: its ORM
writes share the checkpoint's transaction), a spawn (children created through the ORM), the
other host operations (``host_ops``: a replace, cancel, answer, reset), an in-memory database
(another connection would see another database), and a coroutine a sync caller awaits through
``async_to_sync``: that caller's thread may hold a transaction these statements must see, so
they go there, as before.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from django.db import connection as django_connection
from django.db.models import Model
from django.db.models.fields import AutoFieldMixin

from agents_app.runtime import rules
from agents_app.runtime.errors import NotFound
from agents_app.runtime.seams import (
    Commit,
    Outcome,
    SessionRef,
    SessionStatus,
    TurnInput,
    TurnRecord,
    TurnState,
    TurnStatus,
)
from sessions_app import models as m
from sessions_app.site_errors import NotSessionOwner
from sessions_app.store import checkpoint, checkpoint_plain, lease, reads, transcripts
from sessions_app.store.lite_conn import (  # noqa: F401 (Busy, here, close_all, drop_unusable: the store's names)
    Busy,
    Cursor,
    LiteCursor,
    close_all,
    drop_unusable,
    here,
    write_cursor,
)
from sessions_app.store.rows import UnitWriter, loads, record_of

# -- units and calls ------------------------------------------------------------------------------


def commit(tx: UnitWriter) -> Commit:
    """A recorded unit (no children: a spawn goes through the ORM) as one transaction."""
    with write_cursor() as cur:
        written = checkpoint_plain.write_plain(
            cur, tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages, tx.steps, tx.events, tx.moved, tx.result
        )
    transcripts.wrote((written.session_id, written.generation), tx.messages, written.rows, tx.turn_id)  # committed
    return Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)


def write_inside(tx: UnitWriter) -> checkpoint.Written:
    """A unit's checkpoint inside its atomic block on Django's connection (a sync tool's unit,
    whose ORM writes it commits with): ``checkpoint_plain.write_plain``'s statements on the sqlite3
    connection under Django's, in the same transaction, with Django's errors. Django's cursor
    wrappers (one regex per statement among them) cost more than the statements."""
    assert django_connection.in_atomic_block
    with django_connection.wrap_database_errors:
        cur = django_connection.connection.cursor(Cursor)
        try:
            return checkpoint_plain.write_plain(
                cur, tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages, tx.steps, tx.events, tx.moved, tx.result
            )
        finally:
            cur.close()


def journal(turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
    with LiteCursor(None) as cur:  # one statement: its own transaction
        checkpoint_plain.write_journal(turn_id, attempt_id, changes, cur)


def load(turn_id: str) -> TurnState:
    with LiteCursor("BEGIN") as cur:  # one snapshot for the row, the steps and the transcript
        return reads.load_on(cur, _turn(cur, turn_id), held=True)


def get_turn(turn_id: str) -> TurnRecord:
    with LiteCursor(None) as cur:
        return record_of(_turn(cur, turn_id))


def next_queued(session: SessionRef) -> str | None:
    with LiteCursor(None) as cur:
        return reads.next_queued(session, cur)


def claim(turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float) -> TurnRecord | None:
    """``lease.claim`` in one transaction: the claim, the row, the session marked running."""
    with write_cursor() as cur:
        turn = _claimed(cur, turn_id, owner, attempt_id, now, lease_seconds)
        return None if turn is None else record_of(turn)


def claim_and_load(
    turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
) -> TurnState | None:
    """``claim`` and ``load`` in one transaction (``SessionStore.claim_and_load``), and the
    opening's unit when ``opening`` offers one for the loaded state: written as ``commit``
    writes it (``checkpoint_plain.write_plain``, fenced on this attempt), before the same COMMIT."""
    with write_cursor() as cur:
        turn = _claimed(cur, turn_id, owner, attempt_id, now, lease_seconds)
        if turn is None:
            return None
        state = reads.load_on(cur, turn, held=True)
        work = opening(state) if opening is not None else None
        if work is None:
            return state
        tx = UnitWriter(turn_id, attempt_id)
        work(tx)
        assert not tx.children, "an opening spawns nothing"
        written = checkpoint_plain.write_plain(
            cur, turn_id, attempt_id, tx.turn_changes, tx.messages, tx.steps, tx.events, tx.moved, tx.result
        )
    transcripts.wrote((written.session_id, written.generation), tx.messages, written.rows, turn_id)  # committed
    state.opened = Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)
    return state


def _claimed(
    cur: Cursor, turn_id: str, owner: str, attempt_id: str, now: float, lease_seconds: float
) -> SimpleNamespace | None:
    """The claim on ``cur``: the turn's row once claimed (its session marked running), else None."""
    row = cur.execute(CLAIMED, lease.claim_params(turn_id, owner, attempt_id, now, lease_seconds)).fetchone()
    if row is None:
        return None
    turn = _row(row)
    if turn.session.status != SessionStatus.RUNNING:
        cur.execute(lease.SESSION_RUNNING, [str(SessionStatus.RUNNING), turn.session_id])
    # what its checkpoints need not read back (the row's facts never change)
    transcripts.remember_facts(turn_id, (turn.session_id, turn.generation, turn.parent_id, turn.spawn_step))
    return turn


def heartbeat(turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
    with LiteCursor(None) as cur:
        return lease.heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds, cur=cur)


def release(turn_id: str, *, attempt_id: str) -> None:
    with LiteCursor(None) as cur:
        lease.release(turn_id, attempt_id=attempt_id, cur=cur)


def create_turn(
    session: SessionRef, input: TurnInput, *, turn_id: str, policy: dict[str, Any] | None = None, created_by: Any = None
) -> Outcome:
    """``host_ops.create_turn`` without a replace (which cascades through the ORM), as plain
    statements in one transaction: the session (created, owned by ``created_by``, if new; a
    user's own only, else ``NotSessionOwner``; the write lock serializes starts as the session's
    row lock does on PostgreSQL), its next place in the chain with its status and the rules'
    check in one statement, the queued turn; its record is built from what was written, not
    read back."""
    now = checkpoint.plain_now()
    owner = None if created_by is None else getattr(created_by, "pk", None)
    # as the ORM stores the user model's key (a UUID is 32 hex digits on SQLite)
    owner = m.Session._meta.get_field("owner").get_db_prep_save(owner, django_connection)
    # nothing parked (check_start) and a queued turn: the status the recompute would give
    # (``checkpoint.session_status_sql``); a start the rules refuse rolls it back with the rest
    facts = [now, str(SessionStatus.RUNNING), session.agent, session.key, turn_id]
    with write_cursor() as cur:
        row = cur.execute(NEXT_IN_CHAIN, facts).fetchone()
        if row is None:
            _insert(
                cur, m.Session, agent=session.agent, key=session.key, owner_id=owner, created_at=now, updated_at=now
            )
            row = cur.execute(NEXT_IN_CHAIN, facts).fetchone()
        session_id, generation, order, session_owner, exists, parked, taken_over = row
        if owner is not None and session_owner != owner:  # rolled back with the chain's place
            raise NotSessionOwner(f"session {session} is not the creator's")
        rules.check_start(turn_exists=bool(exists), parked=bool(parked), taken_over=bool(taken_over))
        stored_input = checkpoint.dumps(input.to_json())
        stored_policy = None if policy is None else checkpoint.dumps(policy)
        _insert(
            cur,
            m.Turn,
            id=turn_id,
            session_id=session_id,
            order=order,
            generation=generation,
            status=str(TurnStatus.QUEUED),
            kind=input.kind,
            source=input.source or "",
            input=stored_input,
            policy=stored_policy,
            created_by_id=owner,
            created_at=now,
            updated_at=now,
        )
    # the row as ``record_of`` reads it: the model's defaults for the rest
    return Outcome(
        turn=TurnRecord(
            turn_id=turn_id,
            session=SessionRef(session.agent, session.key),
            status=TurnStatus.QUEUED,
            input=TurnInput.from_json(loads(stored_input)),
            generation=generation,
            policy=None if policy is None else loads(stored_policy),
        )
    )


#: the session's next place in the chain, with its status, its owner, and rules.check_start's three facts:
#: the id is taken; the live generation has a parked turn; a person has taken the session over
NEXT_IN_CHAIN = (
    "UPDATE sessions_app_session SET turn_seq = turn_seq + 1, updated_at = %s, status = %s "
    "WHERE agent = %s AND key = %s RETURNING id, generation, turn_seq, owner_id, "
    "EXISTS (SELECT 1 FROM sessions_app_turn WHERE id = %s), "
    "EXISTS (SELECT 1 FROM sessions_app_turn t WHERE t.session_id = sessions_app_session.id "
    f"AND t.status = '{TurnStatus.SUSPENDED.value}' AND t.waiting = 0 "
    "AND t.generation = sessions_app_session.generation), "
    "EXISTS (SELECT 1 FROM sessions_app_takeover o WHERE o.session_id = sessions_app_session.id "
    "AND o.ended_at IS NULL)"
)


@functools.cache
def _inserting(model: type[Model]) -> tuple[str, tuple[str, ...], tuple[Any, ...]]:
    """An INSERT of a whole ``model`` row (its auto id aside): the statement, the fields'
    attnames, and their defaults as the ORM saves them (the model stays their one source)."""
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, AutoFieldMixin)]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    sql = f"INSERT INTO {model._meta.db_table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    defaults = tuple(f.get_db_prep_save(f.get_default(), django_connection) for f in fields)
    return sql, tuple(f.attname for f in fields), defaults


def _insert(cur: Cursor, model: type, **values: Any) -> None:
    """``values``: by attname, as the database takes them; the other fields get their defaults."""
    sql, names, defaults = _inserting(model)
    assert values.keys() <= set(names), set(values) - set(names)
    cur.execute(sql, [values[n] if n in values else d for n, d in zip(names, defaults)])


# -- a turn's row, as record_of and reads.state_of read it ----------------------------------------

_TURN = (
    "id",
    "status",
    "input",
    "generation",
    "cancel_reason",
    "attempt_id",
    "attempts",
    "lease_owner",
    "lease_expires_at",
    "phase",
    "journal",
    "pending",
    "policy",
    "text",
    "error",
    "usage",
    "parent_id",
    "depth",
    "waiting",
    "session_id",
    "spawn_step",
)
_SESSION = ("agent", "key", "status", "generation", "boundary", "summary_index")
_JSON = frozenset({"input", "journal", "pending", "policy", "error", "usage"})
TURN = (
    f"SELECT {', '.join('t.' + c for c in _TURN)}, {', '.join('s.' + c for c in _SESSION)} "
    "FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id WHERE t.id = %s"
)


#: ``lease.CLAIM`` that answers the claimed row as ``TURN`` reads it (its session's columns
#: by the row's key: a RETURNING clause reads no join)
CLAIMED = f"{lease.CLAIM.rstrip()} RETURNING {', '.join(_TURN)}, " + ", ".join(
    f"(SELECT s.{c} FROM sessions_app_session s WHERE s.id = sessions_app_turn.session_id)" for c in _SESSION
)


def _turn(cur: Cursor, turn_id: str) -> SimpleNamespace:
    """The turn's row with its ``session`` (the attributes of ``models.Turn`` that
    ``rows.record_of`` and ``reads.state_of`` read; JSON columns decoded as Django does)."""
    row = cur.execute(TURN, [turn_id]).fetchone()
    if row is None:
        raise NotFound(f"no turn {turn_id}")
    return _row(row)


#: the positions of the JSON columns in a ``TURN`` row
_JSON_AT = tuple((n, c) for n, c in enumerate(_TURN) if c in _JSON)


def _row(row: tuple[Any, ...]) -> SimpleNamespace:
    """A ``TURN`` (or ``CLAIMED``) row as ``_turn`` answers it."""
    columns = dict(zip(_TURN, row))
    for n, column in _JSON_AT:
        if row[n] is not None:
            columns[column] = loads(row[n])
    turn = SimpleNamespace(**columns)
    turn.session = SimpleNamespace(**dict(zip(_SESSION, row[len(_TURN) :])))
    return turn
