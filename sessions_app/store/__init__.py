"""DjangoSessionStore: the SessionStore on the Django database (SQLite or PostgreSQL).

The one package that opens transactions for the engine and knows SQL and the wire:

- ``checkpoint``  one unit of work: the fence, the transcript rows, the step memo, the events
- ``wire``        PostgreSQL: a checkpoint's statements as one libpq pipeline segment
- ``direct``      PostgreSQL: the store's own connection, for units that run no tool code, and heartbeats
- ``lite``        SQLite: the store's own connection, for units and reads that run no tool code
- ``eventlog``    events that repeat a message of their checkpoint store its position
- ``records``     rows to the runtime's records; the unit's writer (the Tx)
- ``reads``       a turn's state in O(1) queries, the event log, pending requests
- ``transcripts`` the transcripts this process decoded already (a load reads past them only)
- ``lease``       claim, heartbeat, release (conditional UPDATEs)
- ``opening``     PostgreSQL: a turn's creation, and its claim with its load, one round trip each
- ``control``     create, cancel, answer, reset (the host rules, inside their transaction)
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
host operations (``control``, ``opening.create``: create, replace, cancel, answer, reset) lock
the session with ``SELECT … FOR UPDATE`` before they touch a turn; a checkpoint's batch, and a
claim with its load (``opening.claim_and_load``), open with ``checkpoint_pg.LOCK_SESSION`` (``FOR NO
KEY UPDATE`` of its turn's session) before their UPDATE of the turn row, and only then touch the
session's counters and status. ``lease.claim`` (SQLite), heartbeat and release are single-row
statements in their own transaction. Taken in the other
order, a checkpoint (turn, then session) and a replace (session, then its turns) deadlocked.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from typing import Any, Callable

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction

from agents_app.runtime.seams import (
    Commit,
    LoggedEvent,
    Outcome,
    Phase,
    SessionRef,
    TurnInput,
    TurnRecord,
    TurnState,
)
from sessions_app.store import (
    checkpoint_pg,
    checkpoint_plain,
    control,
    direct,
    lease,
    lite,
    opening,
    reads,
    toolsql,
    transcripts,
    tree,
)
from sessions_app.store.pipes import Pipes
from sessions_app.store.records import UnitWriter, journal_changes
from sessions_app.store.threads import Threads, _drop_unusable_connections, _on_pool_thread

opening_ = opening  # the module, where ``claim_and_load``'s ``opening`` (the loop's offer) hides its name


class DjangoSessionStore:
    def __init__(self, *, clock: Callable[[], float] = time.time, own_connection: bool = True,
                 pipes: Pipes | None = None, threads: Threads | None = None) -> None:
        """``own_connection``: on PostgreSQL, a turn's creation and its claim with its load run on
        the store's own connection (``direct``), on the caller's thread. False keeps them on
        Django's connection, where the services' host calls belong: each runs in a thread of its
        own (``async_to_sync``), maybe inside the caller's transaction (a webhook's replay row
        commits with its turn).

        A worker's runner, which drives many turns on one event loop, passes ``pipes`` (on
        PostgreSQL: the store's own connections, never blocking the loop; they take the place of
        ``direct``) and ``threads`` (the bounded pool on which the thread path runs: a sync tool's
        unit, the reads and host calls that use Django's connection — each thread has its own
        connection, so a tool that sleeps holds only its thread). Without ``threads`` the thread
        path is asgiref's one thread that owns Django's connection."""
        self.clock = clock
        self.own_connection = own_connection
        self.pipes = pipes
        self.threads = threads
        #: the thread path's coroutine wrappers, made once per function (asgiref's wrapper
        #: inspects the function)
        self._hops: dict[Any, Callable[..., Any]] = {}

    def _thread(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a coroutine function that runs it on the thread path."""
        hop = self._hops.get(fn)
        if hop is None:
            if self.threads is None:
                hop = sync_to_async(fn)
            else:
                hop = sync_to_async(_on_pool_thread(fn), thread_sensitive=False, executor=self.threads)
            self._hops[fn] = hop
        return hop

    def _own(self) -> Any:
        """The store's own connection when it may use it (PostgreSQL), else None."""
        return direct.connection() if self.own_connection else None

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
        runnable = tree.create_txn(tx.turn_id, tx.children) if tx.children else []
        # the checkpoint also recomputes the session's status when the turn's status changes
        if connection.vendor == "sqlite":
            written = lite.write_inside(tx)
        else:  # PostgreSQL
            written = checkpoint_pg.write(tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages, tx.steps, tx.events,
                                       tx.moved, result=tx.result)
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
        """A recorded unit that runs no tool code, committed from this thread."""
        if tx.children:  # a spawn creates rows through the ORM: Django's connection, its thread
            return await self._thread(self._written_sync)(tx)
        if self.pipes is not None:
            return await self._commit_piped(tx)
        if (raw := direct.connection()) is not None:
            return self.commit_direct(raw, tx.turn_id, tx.attempt_id, tx.into)
        if lite.here():  # SQLite: this thread's own connection, unless another writer holds the lock
            with suppress(lite.Busy):
                return self.commit_lite(tx.turn_id, tx.attempt_id, tx.into)
        return await self._thread(self._written_sync)(tx)

    async def _commit_piped(self, tx: UnitWriter) -> Commit:
        """PostgreSQL on a runner: ``commit_direct``'s batch, on the turn's pipe."""
        assert self.pipes is not None
        pipe = await self.pipes.for_turn(tx.turn_id)
        written = await pipe.drive(checkpoint_pg.write_steps(tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages,
                                                          tx.steps, tx.events, boundary=tx.moved, result=tx.result))
        transcripts.wrote((written.session_id, written.generation), tx.messages, written.rows, tx.turn_id)
        return Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)

    def commit_direct(self, raw: Any, turn_id: str, attempt_id: str | None, record: Callable[[Any], None]) -> Commit:
        """PostgreSQL: the unit on this thread and the store's own connection (``direct``),
        one round trip, COMMIT included."""
        tx = UnitWriter(turn_id, attempt_id)
        record(tx)
        written = checkpoint_pg.write_postgresql(raw, turn_id, attempt_id, tx.turn_changes, tx.messages, tx.steps,
                                              tx.events, boundary=tx.moved, result=tx.result)
        transcripts.wrote((written.session_id, written.generation), tx.messages, written.rows,
                          turn_id)  # committed at its Sync
        return Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)

    def commit_lite(self, turn_id: str, attempt_id: str | None, record: Callable[[Any], None]) -> Commit:
        """SQLite: the unit on this thread and the store's own connection (``lite``), one
        transaction; ``lite.Busy`` (nothing written) when another connection holds the lock."""
        tx = UnitWriter(turn_id, attempt_id)
        record(tx)
        return lite.commit(tx)

    async def journal(self, turn_id: str, attempt_id: str | None, phase: Phase, **data: Any) -> None:
        changes = journal_changes(attempt_id, phase, data)
        if self.pipes is not None:  # lands before the turn's next unit, on the same pipe
            return (await self.pipes.for_turn(turn_id)).defer(checkpoint_pg.journal_batch(turn_id, attempt_id, changes))
        if (raw := direct.connection()) is not None:  # lands before the next checkpoint on raw
            return checkpoint_pg.send_journal(raw, turn_id, attempt_id, changes)
        if lite.here():
            with suppress(lite.Busy):
                return lite.journal(turn_id, attempt_id, changes)
        await self._thread(checkpoint_plain.write_journal)(turn_id, attempt_id, changes)

    # -- reads ----------------------------------------------------------------------------------------

    load_sync = staticmethod(reads.load)
    get_turn_sync = staticmethod(reads.get_turn)
    pending_sync = staticmethod(reads.pending)
    events_sync = staticmethod(reads.events)
    next_queued_sync = staticmethod(reads.next_queued)

    async def load(self, turn_id: str) -> TurnState:
        if lite.here():
            with suppress(lite.Busy):
                return lite.load(turn_id)
        return await self._thread(reads.load)(turn_id)

    async def get_turn(self, turn_id: str) -> TurnRecord:
        if lite.here():
            with suppress(lite.Busy):
                return lite.get_turn(turn_id)
        return await self._thread(reads.get_turn)(turn_id)

    async def pending(self, session: SessionRef) -> list[dict[str, Any]]:
        return await self._thread(reads.pending)(session)

    async def events(self, session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
        return await self._thread(reads.events)(session, after, limit)

    async def next_queued(self, session: SessionRef) -> str | None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.next_queued(session)
        return await self._thread(reads.next_queued)(session)

    # -- the lease --------------------------------------------------------------------------------------

    claim_sync = staticmethod(lease.claim)

    @staticmethod
    def claim_and_load_sync(turn_id: str, *, owner: str, attempt_id: str, now: float,
                            lease_seconds: float) -> TurnState | None:
        if lease.claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds) is None:
            return None
        return reads.load(turn_id)

    async def claim_and_load(self, turn_id: str, *, owner: str, attempt_id: str, now: float,
                             lease_seconds: float, opening: Any = None) -> TurnState | None:
        """On SQLite's own connection the claim's transaction also commits the opening that
        ``opening`` offers (one transaction fewer per turn); on PostgreSQL the claim and its load
        are one round trip whose commit does not wait for the flush, and the opening (which
        must) stays a round trip of its own, as on the thread path."""
        if self.pipes is not None and self.own_connection:
            pipe = await self.pipes.for_turn(turn_id)
            return await pipe.drive(opening_.claim_and_load_steps(turn_id, owner=owner, attempt_id=attempt_id,
                                                                  now=now, lease_seconds=lease_seconds))
        if (raw := self._own()) is not None:
            return opening_.claim_and_load(raw, turn_id, owner=owner, attempt_id=attempt_id, now=now,
                                           lease_seconds=lease_seconds)
        if self.own_connection and lite.here():
            with suppress(lite.Busy):
                return lite.claim_and_load(turn_id, owner=owner, attempt_id=attempt_id, now=now,
                                           lease_seconds=lease_seconds, opening=opening)
        return await self._thread(self.claim_and_load_sync)(turn_id, owner=owner, attempt_id=attempt_id, now=now,
                                                            lease_seconds=lease_seconds)

    async def claim(self, turn_id: str, *, owner: str, attempt_id: str, now: float,
                    lease_seconds: float) -> TurnRecord | None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
        return await self._thread(lease.claim)(turn_id, owner=owner, attempt_id=attempt_id, now=now,
                                               lease_seconds=lease_seconds)

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        """On this thread and the store's own connection, not on the thread that owns Django's:
        a sync tool's unit holds that one for the tool's whole run, and its turn's heartbeats go
        on meanwhile. On SQLite, while another writer holds the lock (a few milliseconds,
        mostly), the beat tries again here for up to a quarter of the lease, without holding the
        loop; then it waits for the lock on the thread path (``lite``), as other calls do."""
        if self.pipes is not None:
            pipe = await self.pipes.for_turn(turn_id)
            return await pipe.drive(lease.heartbeat_steps(turn_id, attempt_id=attempt_id, now=now,
                                                          lease_seconds=lease_seconds))
        if (raw := direct.connection()) is not None:
            return lease.heartbeat_direct(raw, turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
        if lite.here():
            give_up, pause = time.monotonic() + lease_seconds / 4, 0.002
            while True:
                with suppress(lite.Busy):
                    return lite.heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
                if time.monotonic() + pause > give_up:
                    break
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)
        return await self._thread(lease.heartbeat)(turn_id, attempt_id=attempt_id, now=now,
                                                   lease_seconds=lease_seconds)

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.release(turn_id, attempt_id=attempt_id)
        await self._thread(lease.release)(turn_id, attempt_id=attempt_id)

    # -- host operations ---------------------------------------------------------------------------------

    def create_turn_sync(self, session: SessionRef, input: TurnInput, *, turn_id: str, replace: bool = False,
                         policy: dict[str, Any] | None = None, created_by: Any = None) -> TurnRecord:
        outcome = control.create_turn(session, input, turn_id=turn_id, replace=replace, policy=policy,
                                      created_by=created_by)
        assert outcome.turn is not None
        return outcome.turn

    async def create_turn(self, session: SessionRef, input: TurnInput, *, turn_id: str, replace: bool = False,
                          policy: dict[str, Any] | None = None, created_by: Any = None) -> Outcome:
        if not replace and self.own_connection:
            if self.pipes is not None:
                pipe = await self.pipes.for_turn(turn_id)
                return await pipe.drive(opening.create_steps(session, input, turn_id=turn_id, policy=policy,
                                                             created_by=created_by))
            if (raw := direct.connection()) is not None:
                return opening.create(raw, session, input, turn_id=turn_id, policy=policy, created_by=created_by)
            if lite.here():
                with suppress(lite.Busy):
                    return lite.create_turn(session, input, turn_id=turn_id, policy=policy, created_by=created_by)
        return await self._thread(control.create_turn)(session, input, turn_id=turn_id, replace=replace,
                                                       policy=policy, created_by=created_by)

    async def request_cancel(self, turn_id: str, reason: str) -> Outcome:
        return await self._thread(control.request_cancel)(turn_id, reason)

    async def answer(self, turn_id: str, input_id: str, answer: Any, record: dict[str, Any]) -> Outcome:
        return await self._thread(control.answer)(turn_id, input_id, answer, record)

    async def reset(self, session: SessionRef, *, by: Any = None) -> Outcome:
        return await self._thread(control.reset)(session, by=by)

    # -- connections (a worker keeps them across tasks) ----------------------------------------------

    async def drop_broken_connections(self) -> None:
        """Close the connections the server dropped, keep the rest (a connect costs more than a
        short turn's first step)."""
        await sync_to_async(_drop_unusable_connections)()
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
