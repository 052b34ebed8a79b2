"""How the store reaches the database, chosen once when it first runs a call (``choose``): one
class per path, each a ``ThreadPath`` that runs what it cannot do on the caller's thread.

- ``ThreadPath``: Django's connection on the thread that owns it (asgiref's one thread, or a
  thread of a runner's pool): every call. An in-memory SQLite database, and the tests' forced
  path (``DjangoSessionStore(path="thread")``).
- ``LitePath``: SQLite in a file. The units that only record, the turn's reads and lease calls,
  a creation without a replace and a claim with its load run on the store's own connection on the
  caller's thread (``lite``), unless a sync caller waits for this coroutine (its transaction
  must see them) or another writer holds the lock (``lite.Busy``): then the thread path.
- ``DirectPath``: PostgreSQL. A unit, a journal write and a heartbeat go on the store's own
  connection of this thread in one round trip (``direct``); a creation and a claim with its load
  too when the store owns its connection (``own_connection``); reads take the thread path.
- ``PipedPath``: PostgreSQL in a worker's runner: the same, on the turn's pipe (``pipes``), so
  the event loop never blocks on a round trip.

A unit that runs a sync tool (``atomic``) or spawns children is not a path's: it needs Django's
connection and its thread (``DjangoSessionStore.atomic``). The bar for a new fast path is in
docs/architecture.md ("A new fast path").
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from django.db import connections

from agents_app.runtime.seams import Commit, Outcome, SessionRef, TurnInput, TurnRecord, TurnState
from sessions_app.store import checkpoint_pg, checkpoint_plain, direct, host_ops, lease, lite, lite_conn, opening, reads
from sessions_app.store.rows import UnitWriter

if TYPE_CHECKING:
    from sessions_app.store import DjangoSessionStore


class ThreadPath:
    name = "thread"

    def __init__(self, store: DjangoSessionStore) -> None:
        self.store = store
        self.thread = store._thread

    async def commit(self, tx: UnitWriter) -> Commit:
        return await self.thread(self.store._written_sync)(tx)

    async def journal(self, turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
        await self.thread(checkpoint_plain.write_journal)(turn_id, attempt_id, changes)

    async def load(self, turn_id: str) -> TurnState:
        return await self.thread(reads.load)(turn_id)

    async def get_turn(self, turn_id: str) -> TurnRecord:
        return await self.thread(reads.get_turn)(turn_id)

    async def next_queued(self, session: SessionRef) -> str | None:
        return await self.thread(reads.next_queued)(session)

    async def claim_and_load(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
    ) -> TurnState | None:
        return await self.thread(self.store.claim_and_load_sync)(
            turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
        )

    async def claim(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
    ) -> TurnRecord | None:
        return await self.thread(lease.claim)(
            turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
        )

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        return await self.thread(lease.heartbeat)(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        await self.thread(lease.release)(turn_id, attempt_id=attempt_id)

    async def create_turn(
        self, session: SessionRef, input: TurnInput, *, turn_id: str, policy: dict[str, Any] | None, created_by: Any
    ) -> Outcome:
        """A creation without a replace (a replace cancels turns first: always the thread path)."""
        return await self.thread(host_ops.create_turn)(
            session, input, turn_id=turn_id, replace=False, policy=policy, created_by=created_by
        )


class LitePath(ThreadPath):
    name = "lite"

    async def commit(self, tx: UnitWriter) -> Commit:
        if lite.here():
            with suppress(lite.Busy):
                return self.store.commit_lite(tx.turn_id, tx.attempt_id, tx.into)
        return await super().commit(tx)

    async def journal(self, turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.journal(turn_id, attempt_id, changes)
        await super().journal(turn_id, attempt_id, changes)

    async def load(self, turn_id: str) -> TurnState:
        if lite.here():
            with suppress(lite.Busy):
                return lite.load(turn_id)
        return await super().load(turn_id)

    async def get_turn(self, turn_id: str) -> TurnRecord:
        if lite.here():
            with suppress(lite.Busy):
                return lite.get_turn(turn_id)
        return await super().get_turn(turn_id)

    async def next_queued(self, session: SessionRef) -> str | None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.next_queued(session)
        return await super().next_queued(session)

    async def claim_and_load(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
    ) -> TurnState | None:
        """The claim's transaction also commits the opening ``opening`` offers (one transaction
        fewer per turn)."""
        if self.store.own_connection and lite.here():
            with suppress(lite.Busy):
                return lite.claim_and_load(
                    turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds, opening=opening
                )
        return await super().claim_and_load(
            turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
        )

    async def claim(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
    ) -> TurnRecord | None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
        return await super().claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        """While another writer holds the lock (a few milliseconds, mostly), the beat tries again
        here for up to a quarter of the lease, without holding the loop; then it waits for the
        lock on the thread path."""
        if lite.here():
            give_up, pause = time.monotonic() + lease_seconds / 4, 0.002
            while True:
                with suppress(lite.Busy):
                    return lite.heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
                if time.monotonic() + pause > give_up:
                    break
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.25)
        return await super().heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        if lite.here():
            with suppress(lite.Busy):
                return lite.release(turn_id, attempt_id=attempt_id)
        await super().release(turn_id, attempt_id=attempt_id)

    async def create_turn(
        self, session: SessionRef, input: TurnInput, *, turn_id: str, policy: dict[str, Any] | None, created_by: Any
    ) -> Outcome:
        if self.store.own_connection and lite.here():
            with suppress(lite.Busy):
                return lite.create_turn(session, input, turn_id=turn_id, policy=policy, created_by=created_by)
        return await super().create_turn(session, input, turn_id=turn_id, policy=policy, created_by=created_by)


class DirectPath(ThreadPath):
    name = "direct"

    def _raw(self) -> Any:
        raw = direct.connection()
        assert raw is not None, "DirectPath on a database that is not PostgreSQL"
        return raw

    async def commit(self, tx: UnitWriter) -> Commit:
        return self.store.commit_direct(self._raw(), tx.turn_id, tx.attempt_id, tx.into)

    async def journal(self, turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
        """Lands before the next checkpoint on the same connection, which reads its answer."""
        checkpoint_pg.send_journal(self._raw(), turn_id, attempt_id, changes)

    async def claim_and_load(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
    ) -> TurnState | None:
        """The claim and its load in one round trip whose commit does not wait for the flush;
        the opening (which must) stays a round trip of its own, as on the thread path."""
        if self.store.own_connection:
            return opening_.claim_and_load(
                self._raw(), turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
            )
        return await super().claim_and_load(
            turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
        )

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        """On this thread and the store's own connection, not on the thread that owns Django's:
        a sync tool's unit holds that one for the tool's whole run, and its heartbeats go on."""
        return lease.heartbeat_direct(self._raw(), turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def create_turn(
        self, session: SessionRef, input: TurnInput, *, turn_id: str, policy: dict[str, Any] | None, created_by: Any
    ) -> Outcome:
        if self.store.own_connection:
            return opening.create(self._raw(), session, input, turn_id=turn_id, policy=policy, created_by=created_by)
        return await super().create_turn(session, input, turn_id=turn_id, policy=policy, created_by=created_by)


opening_ = opening  # ``claim_and_load``'s ``opening`` (the loop's offer) hides the module's name there


class PipedPath(DirectPath):
    name = "piped"

    async def commit(self, tx: UnitWriter) -> Commit:
        return await self.store._commit_piped(tx)

    async def journal(self, turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
        """Lands before the turn's next unit, on the same pipe."""
        (await self._pipe(turn_id)).defer(checkpoint_pg.journal_batch(turn_id, attempt_id, changes))

    async def claim_and_load(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
    ) -> TurnState | None:
        if self.store.own_connection:
            pipe = await self._pipe(turn_id)
            return await pipe.drive(
                opening_.claim_and_load_steps(
                    turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
                )
            )
        return await ThreadPath.claim_and_load(
            self, turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds
        )

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        pipe = await self._pipe(turn_id)
        return await pipe.drive(
            lease.heartbeat_steps(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
        )

    async def create_turn(
        self, session: SessionRef, input: TurnInput, *, turn_id: str, policy: dict[str, Any] | None, created_by: Any
    ) -> Outcome:
        if self.store.own_connection:
            pipe = await self._pipe(turn_id)
            return await pipe.drive(
                opening.create_steps(session, input, turn_id=turn_id, policy=policy, created_by=created_by)
            )
        return await ThreadPath.create_turn(self, session, input, turn_id=turn_id, policy=policy, created_by=created_by)

    async def _pipe(self, turn_id: str) -> Any:
        assert self.store.pipes is not None
        return await self.store.pipes.for_turn(turn_id)


PATHS = {cls.name: cls for cls in (ThreadPath, LitePath, DirectPath, PipedPath)}


def choose(store: DjangoSessionStore) -> ThreadPath:
    """The path for ``store`` on this site's database (``store.forced``: a test's choice)."""
    if store.forced is not None:
        return PATHS[store.forced](store)
    wrapper = connections["default"]
    if wrapper.vendor == "postgresql":
        return PipedPath(store) if store.pipes is not None else DirectPath(store)
    if wrapper.vendor == "sqlite" and not lite_conn.in_memory(wrapper.settings_dict["NAME"]):
        return LitePath(store)
    return ThreadPath(store)
