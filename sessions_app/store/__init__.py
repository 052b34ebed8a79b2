"""DjangoSessionStore: the SessionStore on the Django database (SQLite or PostgreSQL).

The one package that opens transactions for the engine and knows SQL and the wire:

- ``checkpoint``  one unit of work: the fence, the transcript rows, the step memo, the events
- ``wire``        PostgreSQL: a checkpoint's statements as one libpq pipeline segment
- ``direct``      PostgreSQL: the store's own connection, for units that run no tool code, and heartbeats
- ``lite``        SQLite: the store's own connection, for units and reads that run no tool code
- ``eventlog``    events that repeat a message of their checkpoint store its position
- ``rows``        rows to the runtime's records; the unit's writer (the Tx)
- ``reads``       a turn's state in O(1) queries, the event log, pending requests
- ``transcripts`` the transcripts this process decoded already (a load reads past them only)
- ``lease``       claim, heartbeat, release (conditional UPDATEs)
- ``opening``     PostgreSQL: a turn's creation, and its claim with its load, one round trip each
- ``host_ops``    create, cancel, answer, reset (the host rules, inside their transaction)
- ``forks``       fork and switch the branches of a conversation (generations sharing history)
- ``toolsql``     what a sync tool's unit sent through Django's connection; SQLite's lock, taken late

How a unit runs is the store's business: ``atomic`` (work that writes through Django's
connection — a sync tool's ORM rows) runs on the thread that owns that connection, so the
tool's writes and the checkpoint share one ``transaction.atomic()`` (when the tool sent no SQL,
there is nothing to share: its checkpoint is written as ``commit``'s, from the caller's thread);
``commit`` (work that only records through the Tx) runs on the caller's thread and the store's
own connection: on PostgreSQL one round trip, no thread hop (``direct``); on SQLite a few
statements, no thread hop either (``lite``, which also runs the turn's reads and lease calls;
when another connection holds SQLite's write lock, the call goes to the thread path rather than
stall the event loop). So do a turn's creation and its claim with its load (``opening`` on
PostgreSQL, ``lite`` on SQLite), for a store that owns its connection (``own_connection``).
Every checkpoint is fenced: it commits only if the attempt still owns the turn, else
everything — tool writes included — rolls back.

Lock order (every transaction that takes both): the session row, then its turns' rows. The
host operations (``host_ops``, ``opening.create``: create, replace, cancel, answer, reset) lock
the session with ``SELECT … FOR UPDATE`` before they touch a turn; a claim (``opening``) takes
``unit_sql.LOCK_SESSION`` (``FOR NO KEY UPDATE``) in its claim's statement (``CLAIM_LOCKED``), a
checkpoint's opening statement before the turn's row (``unit_sql.unit_statement``; one that
numbers events and keeps the status locks the row by that UPDATE), then the session's status.
``lease.claim`` (SQLite), heartbeat and release are single-row statements in their own transaction.
Taken in the other order, a checkpoint (turn, then session) and a replace (session, then its turns) deadlocked.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction

from agents_app.runtime.seams import (
    Commit,
    LoggedEvent,
    Outcome,
    Phase,
    SessionRef,
    SessionStore,
    TurnInput,
    TurnRecord,
    TurnState,
    Tx,
)
from sessions_app.store import (
    checkpoint_pg,
    direct,
    forks,
    host_ops,
    lease,
    lite,
    paths,
    reads,
    spawning,
    toolsql,
    transcripts,
)
from sessions_app.store.pipes import Pipes
from sessions_app.store.rows import UnitWriter, journal_changes
from sessions_app.store.threads import Threads, drop_unusable_connections, inline, on_pool_thread


class DjangoSessionStore:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        own_connection: bool = True,
        pipes: Pipes | None = None,
        threads: Threads | None = None,
        path: str | None = None,
        inline: bool = False,
    ) -> None:
        """``inline``: the thread path calls each function on the awaiting thread, which owns
        Django's connection and drives the coroutine with no event loop (``services._host_call``).
        ``own_connection``: on PostgreSQL, a turn's creation and its claim with its load run on
        the store's own connection (``direct``), on the caller's thread. False keeps them on
        Django's connection, where the services' host calls belong (maybe inside the caller's
        transaction: a webhook's replay row commits with its turn).

        A worker's runner, which drives many turns on one event loop, passes ``pipes`` (on
        PostgreSQL: the store's own connections, never blocking the loop; they take the place of
        ``direct``) and ``threads`` (the bounded pool on which the thread path runs: a sync tool's
        unit, the reads and host calls that use Django's connection — each thread has its own
        connection, so a tool that sleeps holds only its thread). Without ``threads`` the thread
        path is asgiref's one thread that owns Django's connection."""
        self.clock = clock
        self.own_connection = own_connection
        self.inline = inline
        self.pipes = pipes
        self.threads = threads
        #: how it reaches the database (``paths``): chosen at its first call; ``path`` forces one
        #: ("thread", "lite", "direct", "piped": the contract suite runs each)
        self.forced = path
        self._chosen: paths.ThreadPath | None = None
        #: the thread path's coroutine wrappers, made once per function (asgiref's wrapper
        #: inspects the function)
        self._hops: dict[Any, Callable[..., Any]] = {}

    def _thread(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a coroutine function that runs it on the thread path."""
        hop = self._hops.get(fn)
        if hop is None:
            if self.inline:
                hop = inline(fn)
            elif self.threads is None:
                hop = sync_to_async(fn)
            else:
                hop = sync_to_async(on_pool_thread(fn), thread_sensitive=False, executor=self.threads)
            self._hops[fn] = hop
        return hop

    @property
    def path(self) -> paths.ThreadPath:
        if self._chosen is None:
            self._chosen = paths.choose(self)
        return self._chosen

    def unwrap(self) -> Any:
        return connection

    # -- units of work ------------------------------------------------------------------------------

    def atomic_sync(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], None]) -> Commit:
        """A unit in one ``transaction.atomic()`` on this thread's Django connection (nested in
        the caller's transaction, if one is open)."""
        tx = UnitWriter(turn_id, attempt_id)
        with transaction.atomic():
            work(tx)
            return self._write_sync(tx)

    def _written_sync(self, tx: UnitWriter) -> Commit:
        with transaction.atomic():
            return self._write_sync(tx)

    def _write_sync(self, tx: UnitWriter) -> Commit:
        # a spawn: the parent's session row first (the lock order), its children, then the fence
        runnable = spawning.create_txn(tx.turn_id, tx.children) if tx.children else []
        # the checkpoint also recomputes the session's status when the turn's status changes
        if connection.vendor == "sqlite":
            written = lite.write_inside(tx)
        else:  # PostgreSQL
            written = checkpoint_pg.write(
                tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages, tx.steps, tx.events, tx.moved, result=tx.result
            )
        return Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=runnable + written.runnable)

    def tool_unit(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], None]) -> Commit | UnitWriter:
        """``atomic``'s side on the thread that owns Django's connection: ``atomic_sync``, watched
        (``toolsql``). When ``work`` sent nothing through the connection, returns what it
        recorded instead, uncommitted, for the caller's thread to commit as a plain unit: the
        transaction had nothing of the tool's to commit with it. Inside a caller's transaction,
        ``atomic_sync`` as it is."""
        if connection.in_atomic_block:
            return self.atomic_sync(turn_id, attempt_id, work)
        tx = UnitWriter(turn_id, attempt_id)
        watch = toolsql.Watch(connection)
        with connection.execute_wrapper(watch), transaction.atomic():
            try:
                work(tx)
            finally:
                # no lock for the tool's SQL, or the database failed under it: the unit's error, not the tool's
                if watch.unit_error is not None:
                    raise watch.unit_error
            if not tx.children and watch.untouched():
                return tx
            return self._write_sync(tx)

    async def atomic(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], None]) -> Commit:
        done = await self._thread(self.tool_unit)(turn_id, attempt_id, work)
        if isinstance(done, Commit):
            return done
        return await self._commit_recorded(done)  # the tool sent no SQL: a plain unit

    async def commit(self, turn_id: str, attempt_id: str | None, record: Callable[[Any], None]) -> Commit:
        tx = UnitWriter(turn_id, attempt_id)
        record(tx)
        return await self._commit_recorded(tx)

    async def _commit_recorded(self, tx: UnitWriter) -> Commit:
        """A recorded unit that runs no tool code, committed from this thread (its path's way)."""
        if tx.children:  # a spawn creates rows through the ORM: Django's connection, its thread
            return await self._thread(self._written_sync)(tx)
        return await self.path.commit(tx)

    async def _commit_piped(self, tx: UnitWriter) -> Commit:
        """PostgreSQL on a runner: ``commit_direct``'s batch, on the turn's pipe."""
        assert self.pipes is not None
        pipe = await self.pipes.for_turn(tx.turn_id)
        written = await pipe.drive(
            checkpoint_pg.write_steps(
                tx.turn_id,
                tx.attempt_id,
                tx.turn_changes,
                tx.messages,
                tx.steps,
                tx.events,
                boundary=tx.moved,
                result=tx.result,
            )
        )
        transcripts.wrote((written.session_id, written.generation), tx.messages, written.rows, tx.turn_id)
        return Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)

    def commit_direct(self, raw: Any, turn_id: str, attempt_id: str | None, record: Callable[[Any], None]) -> Commit:
        """PostgreSQL: the unit on this thread and the store's own connection (``direct``),
        one round trip, COMMIT included."""
        tx = UnitWriter(turn_id, attempt_id)
        record(tx)
        written = checkpoint_pg.write_postgresql(
            raw,
            turn_id,
            attempt_id,
            tx.turn_changes,
            tx.messages,
            tx.steps,
            tx.events,
            boundary=tx.moved,
            result=tx.result,
        )
        transcripts.wrote(
            (written.session_id, written.generation), tx.messages, written.rows, turn_id
        )  # committed at its Sync
        return Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)

    def commit_lite(self, turn_id: str, attempt_id: str | None, record: Callable[[Any], None]) -> Commit:
        """SQLite: the unit on this thread and the store's own connection (``lite``), one
        transaction; ``lite.Busy`` (nothing written) when another connection holds the lock."""
        tx = UnitWriter(turn_id, attempt_id)
        record(tx)
        return lite.commit(tx)

    async def journal(self, turn_id: str, attempt_id: str | None, phase: Phase, **data: Any) -> None:
        await self.path.journal(turn_id, attempt_id, journal_changes(attempt_id, phase, data))

    # -- reads ----------------------------------------------------------------------------------------

    load_sync = staticmethod(reads.load)
    get_turn_sync = staticmethod(reads.get_turn)
    pending_sync = staticmethod(reads.pending)
    events_sync = staticmethod(reads.events)
    next_queued_sync = staticmethod(reads.next_queued)

    async def load(self, turn_id: str) -> TurnState:
        return await self.path.load(turn_id)

    async def get_turn(self, turn_id: str) -> TurnRecord:
        return await self.path.get_turn(turn_id)

    async def pending(self, session: SessionRef) -> list[dict[str, Any]]:
        return await self._thread(reads.pending)(session)

    async def events(self, session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
        return await self._thread(reads.events)(session, after, limit)

    async def next_queued(self, session: SessionRef) -> str | None:
        return await self.path.next_queued(session)

    # -- the lease --------------------------------------------------------------------------------------

    claim_sync = staticmethod(lease.claim)

    @staticmethod
    def claim_and_load_sync(
        turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
    ) -> TurnState | None:
        if lease.claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds) is None:
            return None
        return reads.load(turn_id)

    async def claim_and_load(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
    ) -> TurnState | None:
        """The claim with its load (and on SQLite's own connection the opening ``opening``
        offers, in the claim's transaction: ``paths.LitePath``)."""
        return await self.path.claim_and_load(
            turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds, opening=opening
        )

    async def claim(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
    ) -> TurnRecord | None:
        return await self.path.claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        """Never on the thread that owns Django's connection while the path has another: a sync
        tool's unit holds that one for the tool's whole run, and its turn's heartbeats go on."""
        return await self.path.heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        await self.path.release(turn_id, attempt_id=attempt_id)

    # -- host operations ---------------------------------------------------------------------------------

    def create_turn_sync(
        self,
        session: SessionRef,
        input: TurnInput,
        *,
        turn_id: str,
        replace: bool = False,
        policy: dict[str, Any] | None = None,
        created_by: Any = None,
    ) -> TurnRecord:
        outcome = host_ops.create_turn(
            session, input, turn_id=turn_id, replace=replace, policy=policy, created_by=created_by
        )
        assert outcome.turn is not None
        return outcome.turn

    async def create_turn(
        self,
        session: SessionRef,
        input: TurnInput,
        *,
        turn_id: str,
        replace: bool = False,
        policy: dict[str, Any] | None = None,
        created_by: Any = None,
    ) -> Outcome:
        if replace:  # it cancels the session's unfinished turns first: Django's connection, its thread
            return await self._thread(host_ops.create_turn)(
                session, input, turn_id=turn_id, replace=True, policy=policy, created_by=created_by
            )
        return await self.path.create_turn(session, input, turn_id=turn_id, policy=policy, created_by=created_by)

    async def request_cancel(self, turn_id: str, reason: str) -> Outcome:
        return await self._thread(host_ops.request_cancel)(turn_id, reason)

    async def answer(self, turn_id: str, input_id: str, answer: Any, record: dict[str, Any]) -> Outcome:
        return await self._thread(host_ops.answer)(turn_id, input_id, answer, record)

    async def resume_parked(self, turn_id: str, reason: str, key: str) -> Outcome | None:
        return await self._thread(host_ops.resume_parked)(turn_id, reason, key)

    async def reset(self, session: SessionRef, *, by: Any = None) -> Outcome:
        return await self._thread(host_ops.reset)(session, by=by)

    async def fork(
        self,
        session: SessionRef,
        input: TurnInput | None,
        *,
        turn_id: str,
        at: int | None = None,
        regenerate: str | None = None,
        policy: dict[str, Any] | None = None,
        created_by: Any = None,
    ) -> Outcome:
        return await self._thread(forks.fork)(
            session, input, turn_id=turn_id, at=at, regenerate=regenerate, policy=policy, created_by=created_by
        )

    async def switch(self, session: SessionRef, generation: int) -> Outcome:
        return await self._thread(forks.switch)(session, generation)

    # -- connections (a worker keeps them across tasks) ----------------------------------------------

    async def drop_broken_connections(self) -> None:
        """Close the connections the server dropped, keep the rest (a connect costs more than a
        short turn's first step)."""
        await sync_to_async(drop_unusable_connections)()
        direct.drop_unusable()
        lite.drop_unusable()

    async def close_connections(self) -> None:
        await sync_to_async(connections.close_all)()
        direct.close_all()
        lite.close_all()
        if self.pipes is not None:
            self.pipes.close()
        if self.threads is not None:
            await asyncio.to_thread(self.threads.close_connections)


if TYPE_CHECKING:  # mypy holds the store to the engine's seams (pyproject.toml [tool.mypy])

    def _is_a_session_store(store: DjangoSessionStore) -> SessionStore:
        return store

    def _is_a_tx(unit: UnitWriter) -> Tx:
        return unit
