"""A turn's opening on PostgreSQL, each step in ONE round trip (a ``wire.Batch``, like a
checkpoint), on whichever psycopg connection the store hands it (its own, ``direct``; or
Django's, inside the caller's transaction):

- ``create``: get-or-create the session (a new one is owned by the creator; one that exists
  must be the creator's when the creator is a user), lock it, refuse under ``rules.check_start``,
  take the next place in the session's chain, insert the queued turn and mark the session
  running — ``host_ops.create_turn``'s statements, in one (``_open``: a new session is written
  once, as the creation leaves it); the runners' wake-up is sent after the commit, by another
  connection (``outbox.queue.Waker``);
- ``claim_and_load``: lock the turn's session, claim the lease (``lease.CLAIM``, unchanged), mark
  the session running, and read back the claimed turn, its step memo and its transcript from the
  boundary — ``lease.claim`` and ``reads.load`` in one transaction; of the transcript, only what
  this process has not decoded already (``transcripts``).

Lock order (the store's): both lock the session row before they touch a turn's. A creation
takes ``FOR UPDATE``, as every host operation does, so it serializes with a checkpoint of the
same session (which takes ``FOR NO KEY UPDATE`` first): the checkpoint that settles a turn for
good and hands its chain over (``checkpoint.NEXT_IN_CHAIN``) sees every turn created before it.

The rules stay in ``agents_app.runtime.rules``: the SQL computes ``check_start``'s facts and,
when one holds, raises ``june_start_refused`` (SQLSTATE JUNE2; migration 0002_database) with the facts
in its DETAIL, which the store hands to ``rules.check_start`` for the error it raises. A replace
(it cancels what it replaces) stays on ``host_ops.create_turn``'s statements.
"""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any, Generator, cast

import psycopg
from django.conf import settings
from django.utils import timezone

from agents_app.runtime import rules
from agents_app.runtime.compaction import transcript_start
from agents_app.runtime.errors import NotFound
from agents_app.runtime.seams import Outcome, SessionRef, SessionStatus, TurnInput, TurnState, TurnStatus
from sessions_app import models as m
from sessions_app.site_errors import NotSessionOwner
from sessions_app.store import checkpoint, lease, reads, transcripts, unit_sql, wire
from sessions_app.store.newrow import Row
from sessions_app.store.rows import record_of

START_REFUSED = "JUNE2"  # SQLSTATE of june_start_refused()
#: the PostgreSQL channel on which the workers' runners listen for queued turns (a database's
#: own: every cluster of the site on that database hears it; ``workers.taker``)
TURNS_CHANNEL = "june_turns"
#: the runners' wake-up (``outbox.queue.wake``)
WAKE = f"SELECT pg_notify('{TURNS_CHANNEL}', '')"
UNIQUE_VIOLATION = "23505"

#: the session is the creator's (its owner, compared as text: any user key), or no creator is
#: named; two parameters, the creator's key twice. A session of another owner matches nothing: it
#: is not locked, no fact is checked on it, no turn is created in it (``NotSessionOwner``)
OWNED = "(%s::text IS NULL OR owner_id::text = %s::text)"
#: ``check_start``'s facts of the creator's session (``OWNED``), locked; the turn's id last
LOCKED = f"SELECT id, generation FROM sessions_app_session WHERE agent = %s::text AND key = %s::text AND {OWNED}"
FACTS = (
    "(SELECT EXISTS (SELECT 1 FROM sessions_app_turn WHERE id = %s::text) AS turn_exists, "
    # the status as a literal, as ``checkpoint.session_status_sql``'s: a parameter's generic plan
    # read every turn the session ever ran (by its foreign key) to find a parked one
    "EXISTS (SELECT 1 FROM sessions_app_turn t WHERE t.session_id = s.id "
    f"AND t.status = '{TurnStatus.SUSPENDED.value}' AND t.generation = s.generation AND t.waiting = 0) AS parked, "
    # a person has the session (``takeover``): its open row, by the partial unique index
    "EXISTS (SELECT 1 FROM sessions_app_takeover o WHERE o.session_id = s.id AND o.ended_at IS NULL) AS taken_over) f"
)
#: raises when one of the facts holds
REFUSE = (
    "CASE WHEN f.turn_exists OR f.parked OR f.taken_over "
    "THEN june_start_refused(f.turn_exists, f.parked, f.taken_over) END"
)
LOCK_AND_CHECK = wire.numbered(f"SELECT {REFUSE} FROM ({LOCKED} FOR UPDATE) s CROSS JOIN LATERAL {FACTS}")
#: the claim (``lease.CLAIM``), the session marked running when it took the lease (``r``: a
#: data-modifying CTE runs whether or not the query reads it), and the claimed row with what its
#: load needs of the session (the session as it was before ``r``: its status is not read), and
#: the load's reads themselves (``reads.LOAD_COLUMNS``: the turn's steps and transcript), of the
#: row it claimed: nothing when it claimed none. A claim that took the lease also turns
#: ``synchronous_commit`` off for its transaction (``claim_and_load_steps``). Parameters:
#: ``lease.CLAIM``'s, then the session's status twice, then ``reads.LOAD_FROM``'s.
_CLAIM_REST = (
    "r AS (UPDATE sessions_app_session SET status = %s::text "
    "WHERE id = (SELECT session_id FROM c) AND status <> %s::text) "
    "SELECT row_to_json(t)::text, s.agent, s.key, s.generation, s.boundary, s.summary_index, "
    f"set_config('synchronous_commit', 'off', true), {reads.LOAD_COLUMNS} "
    f"FROM c AS t JOIN sessions_app_session s ON s.id = t.session_id {reads.LOAD_FROM}"
)
CLAIM = wire.numbered(f"WITH c AS ({lease.CLAIM} RETURNING *), {_CLAIM_REST}")
#: ``CLAIM`` that locks the turn's session first (``unit_sql.LOCK_SESSION``, the store's lock
#: order) in its own statement: a materialized CTE the claim's update reads once, before its scan
#: of the turn (a claim waiting for its session holds no lock of the turn's row). Its reads of the
#: session's other turns (the chain's head) are in the statement's snapshot, taken before the
#: lock: a claim that waited for a unit settling the turn before it in the chain sees that turn
#: unfinished and claims nothing, where ``CLAIM`` after the lock would claim. What it claims, it
#: may (a finished turn never joins the chain again, and the claimed row itself is read again
#: at its update); so only a claim that claimed nothing is sent again, as the lock then ``CLAIM``.
#: Parameters: the turn, then ``CLAIM``'s.
CLAIM_LOCKED = wire.numbered(
    f"WITH l AS MATERIALIZED ({checkpoint.LOCKED_SESSION['turn']}), "
    f"c AS ({lease.CLAIM.rstrip()} AND EXISTS (SELECT 1 FROM l) RETURNING *), {_CLAIM_REST}"
)

TRANSCRIPT_FROM = wire.numbered(reads.TRANSCRIPT_PG)


@functools.cache
def _insert_session() -> tuple[bytes, Row]:
    row = Row(m.Session, given=("agent", "key", "owner_id"))
    return wire.numbered(
        f"INSERT INTO sessions_app_session ({', '.join(row.names)}) VALUES ({', '.join(row.slots)}) "
        "ON CONFLICT (agent, key) DO NOTHING"
    ), row


@functools.cache
def _insert_turn() -> tuple[bytes, Row]:
    """The turn takes its session, place in the chain and generation from the session row, whose
    status it sets (the status and the time first, then ``OWNED``'s and the turn's parameters):
    running, which is what recomputing it (``checkpoint.session_status_sql``) answers once a queued
    turn is in the chain and none is parked (``LOCK_AND_CHECK`` refused the creation then, under
    the same row lock), so the creation recomputes nothing."""
    row = Row(
        m.Turn,
        given=("id", "status", "kind", "source", "input", "policy", "created_by_id"),
        skip=("session", "order", "generation"),
    )
    return wire.numbered(
        "WITH s AS (UPDATE sessions_app_session SET turn_seq = turn_seq + 1, status = %s::text, "
        "updated_at = %s::timestamptz "
        f"WHERE agent = %s::text AND key = %s::text AND {OWNED} RETURNING id, turn_seq, generation) "
        f'INSERT INTO sessions_app_turn (session_id, "order", generation, {", ".join(row.names)}) '
        f"SELECT s.id, s.turn_seq, s.generation, {', '.join(row.slots)} FROM s RETURNING generation, session_id"
    ), row


@functools.cache
def _open() -> tuple[bytes, Row]:
    """A creation in one statement: a new session inserted as the creation leaves it (running,
    its first turn's place taken: written once, not inserted then updated), or else the creator's
    session locked, checked (``LOCK_AND_CHECK``'s facts) and updated as ``_insert_turn`` does;
    then the turn, in whichever. Parameters: the new session's, then ``LOCK_AND_CHECK``'s, then
    the status and the time, then the turn's. No row when neither was found (the session is
    another's, or a concurrent start created it after this statement's snapshot)."""
    row = Row(m.Session, given=("agent", "key", "owner_id", "turn_seq", "status"))
    turn = _insert_turn()[1]
    return wire.numbered(
        f"WITH n AS (INSERT INTO sessions_app_session ({', '.join(row.names)}) VALUES ({', '.join(row.slots)}) "
        "ON CONFLICT (agent, key) DO NOTHING RETURNING id, turn_seq, generation), "
        f"c AS MATERIALIZED (SELECT s.id, {REFUSE} AS refused "
        f"FROM ({LOCKED} AND NOT EXISTS (SELECT 1 FROM n) FOR UPDATE) s CROSS JOIN LATERAL {FACTS}), "
        "u AS (UPDATE sessions_app_session SET turn_seq = turn_seq + 1, status = %s::text, "
        "updated_at = %s::timestamptz WHERE id = (SELECT id FROM c WHERE refused IS NULL) "
        "RETURNING id, turn_seq, generation) "
        f'INSERT INTO sessions_app_turn (session_id, "order", generation, {", ".join(turn.names)}) '
        f"SELECT s.id, s.turn_seq, s.generation, {', '.join(turn.slots)} "
        "FROM (SELECT * FROM n UNION ALL SELECT * FROM u) s RETURNING generation, session_id"
    ), row


def create(
    raw: psycopg.Connection,
    session: SessionRef,
    input: TurnInput,
    *,
    turn_id: str,
    policy: dict[str, Any] | None = None,
    created_by: Any = None,
    ends_transaction: bool = True,
) -> Outcome:
    """``create_steps`` on ``raw``, on this thread."""
    return wire.drive(
        raw,
        create_steps(
            session,
            input,
            turn_id=turn_id,
            policy=policy,
            created_by=created_by,
            status=raw.pgconn.transaction_status,
            ends_transaction=ends_transaction,
        ),
    )


def create_steps(
    session: SessionRef,
    input: TurnInput,
    *,
    turn_id: str,
    policy: dict[str, Any] | None = None,
    created_by: Any = None,
    status: Any = None,
    ends_transaction: bool = True,
) -> Generator[wire.Batch, Any, Outcome]:
    """Create the queued turn in one statement (``_open``; in a second round trip, the three of
    ``LOCK_AND_CHECK``'s when it found no session to use). ``status``, ``ends_transaction``: as
    ``checkpoint_pg.write_steps``'s. Raises what ``rules.check_start`` raises, or ``NotSessionOwner``
    when ``created_by`` (a user) does not own the session that exists; nothing is written then."""
    owner = created_by if getattr(created_by, "pk", None) else None
    creator = None if owner is None else str(owner.pk)
    now = timezone.now()
    owner_id = None if owner is None else owner.pk
    given: dict[str, Any] = {"id": turn_id, "status": TurnStatus.QUEUED, "kind": input.kind}
    given.update(source=input.source or "", input=input.to_json(), policy=policy, created_by_id=owner_id)
    turn_params, turn = _insert_turn()[1].values(given, now)
    check = [session.agent, session.key, creator, creator, turn_id]
    status = checkpoint.IDLE if status is None else status
    opened, new_session = _open()
    new = {"agent": session.agent, "key": session.key, "owner_id": owner_id, "turn_seq": 1}
    params = new_session.values({**new, "status": SessionStatus.RUNNING}, now)[0]
    batch, at = _batch(status, ends_transaction, (opened, [*params, *check, SessionStatus.RUNNING, now, *turn_params]))
    row = (yield from _refusing(batch))[at]
    if not row.ntuples:  # another's session, or one a concurrent start created: in three statements
        insert_session, session_row = _insert_session()
        params = session_row.values({"agent": session.agent, "key": session.key, "owner_id": owner_id}, now)[0]
        after = checkpoint.IDLE if ends_transaction else checkpoint.INTRANS  # as the first batch left it
        insert_turn = [SessionStatus.RUNNING, now, session.agent, session.key, creator, creator, *turn_params]
        statements = ((insert_session, params), (LOCK_AND_CHECK, check), (_insert_turn()[0], insert_turn))
        batch, at = _batch(after, ends_transaction, *statements)
        row = (yield from _refusing(batch))[at]
    if not row.ntuples:
        if creator is not None:  # another's session, or none (deleted meanwhile): ``access`` says which
            raise NotSessionOwner(f"session {session} is not the creator's")
        raise NotFound(f"session {session} was deleted while the turn was created")
    turn["generation"] = wire.number(row, 0)
    transcripts.remember(turn_id, wire.number(row, 1), turn["generation"])
    return Outcome(turn=record_of(SimpleNamespace(**turn), SimpleNamespace(agent=session.agent, key=session.key)))


def _batch(status: Any, ends_transaction: bool, *statements: tuple[bytes, list[Any]]) -> tuple[wire.Batch, int]:
    """(a batch of ``statements`` in the transaction ``status`` and ``ends_transaction`` call for,
    as ``checkpoint_pg.write_steps``'s; the index of the last one's result)."""
    batch = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
    if not ends_transaction and status == checkpoint.IDLE:  # not ours to commit at the Sync
        batch.add(b"BEGIN")
    at = [batch.add(sql, params) for sql, params in statements][-1]
    if ends_transaction and status == checkpoint.INTRANS:
        batch.add(b"COMMIT")
    return batch, at


def _refusing(batch: wire.Batch) -> Generator[wire.Batch, Any, list[Any]]:
    """``batch``'s results; a refusal of the creation raised as ``rules.check_start`` raises it."""
    try:
        results = yield batch
    except psycopg.Error as exc:
        facts = _refused(exc)
        if facts is None:
            raise
    else:
        return cast(list[Any], results)
    rules.check_start(**facts)
    raise AssertionError(f"june_start_refused raised on facts check_start allows: {facts}")


def _refused(exc: psycopg.Error) -> dict[str, bool] | None:
    """``check_start``'s facts when the database refused the creation on them."""
    if exc.sqlstate == START_REFUSED:
        return json.loads(cast(str, exc.diag.message_detail))  # the refusal raises its facts as its DETAIL
    if exc.sqlstate == UNIQUE_VIOLATION and exc.diag.constraint_name == "sessions_app_turn_pkey":
        return {"turn_exists": True, "parked": False, "taken_over": False}  # created meanwhile by a concurrent start
    return None


def claim_and_load(
    raw: psycopg.Connection, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
) -> TurnState | None:
    """``claim_and_load_steps`` on ``raw``, on this thread."""
    return wire.drive(
        raw, claim_and_load_steps(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
    )


def claim_and_load_steps(
    turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
) -> Generator[wire.Batch, Any, TurnState | None]:
    """``lease.claim`` then ``reads.load``, in one transaction and one round trip: the session's
    lock, then the claim with the load's reads, in one statement (``CLAIM_LOCKED``; one that
    claimed nothing is sent again as the lock, then ``CLAIM``); None if not claimed.

    The claim commits without waiting for the WAL flush (``synchronous_commit`` off for its
    transaction, as the provider_started journal): the attempt's next checkpoint (a new turn's
    opening, at once) waits for the flush, which takes the claim with it (the WAL is flushed in
    order), and the server's WAL writer flushes it within ``wal_writer_delay`` anyway. Only a
    crash of the server itself in between loses a claim (a worker's crash loses nothing: the
    server holds the commit): the turn is queued again, uncounted in its attempts, and no
    checkpoint of the attempt can commit (its attempt id is on no row). The claim emits no
    event, so nothing published depends on it."""
    held = transcripts.known(turn_id)
    key, stretch = held if held is not None else ((None, None), transcripts.Stretch(0))
    params = [
        TurnStatus.RUNNING,
        owner,
        now + lease_seconds,
        attempt_id,
        timezone.now(),  # started_at (the first claim's)
        turn_id,
        TurnStatus.QUEUED,
        TurnStatus.RUNNING,
        now,
        SessionStatus.RUNNING,
        SessionStatus.RUNNING,
        *key,
        stretch.start,
        stretch.end,
        stretch.end,
    ]
    batch = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
    # the lock and the claim, which also marks the session running and commits without the flush
    batch.add(CLAIM_LOCKED, [turn_id, *params])
    row = (yield batch)[0]
    if not row.ntuples:  # perhaps only as the snapshot before the lock saw it: ``CLAIM_LOCKED``
        again = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
        again.add(unit_sql.LOCK_SESSION, [turn_id])
        claimed = again.add(CLAIM, params)
        row = (yield again)[claimed]
    if not row.ntuples:
        return None
    columns = json.loads(wire.text(row, 0))
    rec = record_of(SimpleNamespace(**columns), SimpleNamespace(agent=wire.value(row, 1), key=wire.value(row, 2)))
    summary_at = wire.value(row, 5)
    boundary, summary = reads.live_boundary(
        rec.generation,
        wire.number(row, 3),
        wire.number(row, 4),
        None if summary_at is None else int(summary_at),
    )
    rows = [(k, data) for k, data in json.loads(wire.text(row, 7))]
    base = transcript_start(boundary, ((k, d) for k, d in rows if k.startswith("compact:")))
    session = (columns["session_id"], rec.generation)
    transcripts.remember(turn_id, *session)
    # what never changes on the row: a parentless turn's settling checkpoint reports to no one
    transcripts.remember_facts(turn_id, (*session, columns["parent_id"], columns["spawn_step"]))
    if base != boundary:  # a compaction of this turn cut inside it: read from its opening (rare)
        again = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
        again.add(TRANSCRIPT_FROM, [*session, base])
        transcript = reads.messages_of(wire.text((yield again)[0], 0))
    else:
        read_from = wire.number(row, 8)
        unseen = reads.messages_of(wire.text(row, 9))
        transcripts.read(session, read_from, unseen)
        # past the boundary, what this process held (``transcripts``), then what it had not seen
        transcript = stretch.between(base, read_from) + unseen if read_from > base else unseen
    return reads.state_of(rec, rows, transcript, base=base, boundary=boundary, summary=summary)
