"""PostgreSQL on the event loop: the store's own connections, shared by the turns of a worker's
runner, that never block the loop.

A worker process drives many turns on one event loop (``sessions_app.workers.runner``). A unit
of a turn that runs no tool code is one ``wire`` batch: its statements and a Sync, which the
server runs as one implicit transaction, committed at the Sync. A ``Pipe`` keeps one
connection in libpq's pipeline mode for good and lets any number of units be in flight on it
at once, each its own segment: a unit's batch is queued as soon as it is ready and written at the
end of the loop's pass (one write for every unit queued in it: libpq's Sync would write each
one at once, ``wire.queue_sync``), and one reader task reads the segments back in the order
they were sent and hands each unit its results. So the units of many turns share a round trip where they meet (a group commit in
which every unit is still its own fenced transaction: a segment that fails rolls back alone,
the segments after it run), and the loop waits for the socket, never on it.

``Pipes`` is a fixed number of them (``JUNE_WORKER_DB_CONNECTIONS``), and a turn always uses
the same one (by its id): its units reach the server in the order it made them, so a write it
sent without waiting (the provider_started journal, ``defer``) lands before its next unit, as
on the thread's connection (``wire.Batch.defer``). A connection that breaks fails the units in
flight on it (``psycopg.OperationalError``, as a unit on a broken connection fails anywhere:
the attempt ends, its lease runs out and the turn goes on elsewhere) and is opened again by the
next unit that needs it.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import deque
from typing import Any, Callable, Generator, TypeVar

import psycopg
from django.db import connections

from sessions_app.store import wire

log = logging.getLogger(__name__)
T = TypeVar("T")


class Pipe:
    """One connection in pipeline mode, for the units of the loop it was opened on."""

    def __init__(self, conn: psycopg.AsyncConnection) -> None:
        self.conn = conn
        self.pg = conn.pgconn
        self.pg.nonblocking = 1
        self.fd = self.pg.socket
        self.state = wire.PipeState()
        self.loop = asyncio.get_running_loop()
        #: sent units, in order: what each reads back, and who waits for it
        self.sent: deque[tuple[list[tuple[str, Any]], asyncio.Future[list[Any]]]] = deque()
        self.broken: BaseException | None = None
        self._reader: asyncio.Task[None] | None = None
        self._writing = False
        self._flush_due = False
        self._readable: asyncio.Future[None] | None = None

    @property
    def usable(self) -> bool:
        return self.broken is None and not self.conn.closed

    async def run(self, batch: wire.Batch) -> list[Any]:
        """Send ``batch`` as one segment and wait for its results (raises its first error)."""
        return await self._send(batch)

    def defer(self, batch: wire.Batch) -> None:
        """Send ``batch`` without waiting for it; its refusal is logged."""
        self._send(batch).add_done_callback(_log_refusal)

    async def drive(self, steps: Generator[wire.Batch, Any, T]) -> T:
        """``wire.drive``'s unit on this pipe: each batch it yields, sent and awaited."""
        try:
            batch = next(steps)
            while True:
                try:
                    results = await self.run(batch)
                except psycopg.Error as exc:
                    batch = steps.throw(exc)
                else:
                    batch = steps.send(results)
        except StopIteration as stop:
            return stop.value

    def _send(self, batch: wire.Batch) -> asyncio.Future[list[Any]]:
        if self.broken is not None:
            raise psycopg.OperationalError(f"the connection broke: {self.broken}")
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        try:
            expected = batch.send(self.pg, self.state, flush=False)
            self.sent.append((expected, future))
        except psycopg.Error as exc:
            self._break(exc)
            raise
        if not self._flush_due:
            # written once the loop's callbacks of this pass have run: the units the other
            # turns send meanwhile go in the same write
            self._flush_due = True
            self.loop.call_soon(self._flush_queued)
        if self._reader is None:
            self._reader = self.loop.create_task(self._read_all())
        return future

    def _flush_queued(self) -> None:
        self._flush_due = False
        if self.broken is not None:
            return
        try:
            self._flush()
        except psycopg.Error as exc:
            self._break(exc)

    def _flush(self) -> None:
        if self._writing:
            return  # the writer below flushes what was just queued behind its own
        if self.pg.flush() == 1:  # the socket is full: flush the rest as it drains
            self._writing = True
            self.loop.add_writer(self.fd, self._write)

    def _write(self) -> None:
        try:
            left = self.pg.flush()
        except psycopg.Error as exc:
            left = 0
            self._break(exc)
        # a flush that could not send everything reads what the server sent meanwhile (libpq
        # does, to avoid a deadlock): the reader may now have results without the socket saying so
        self._wake()
        if left == 0:
            self._writing = False
            self.loop.remove_writer(self.fd)

    async def _read_all(self) -> None:
        """The reader: the segments back, in the order their units were sent."""
        try:
            while self.sent:
                expected, future = self.sent[0]
                results, error = await self._wait(wire.read_results(self.pg, expected, self.state))
                self.sent.popleft()
                if future.done():  # its caller stopped waiting (a cancelled attempt)
                    continue
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(results)
        except BaseException as exc:  # noqa: BLE001 (a cancelled loop, a broken socket: fail them all)
            self._break(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._reader = None

    async def _wait(self, steps: Generator[int, None, T]) -> T:
        try:
            while True:
                next(steps)  # READ: the reader only ever waits to read
                if self.pg.is_busy():
                    await self._until_readable()
        except StopIteration as stop:
            return stop.value

    async def _until_readable(self) -> None:
        self._readable = self.loop.create_future()
        self.loop.add_reader(self.fd, self._wake)
        try:
            await self._readable
        finally:
            if self._readable is not None:  # (``_break`` unregistered it already)
                self.loop.remove_reader(self.fd)
                self._readable = None

    def _wake(self) -> None:
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)

    def _break(self, exc: BaseException, *, closing: bool = False) -> None:
        if self.broken is None:
            self.broken = exc
            if not closing or self.sent:
                log.warning("store connection broke: %r; %d unit(s) in flight fail", exc, len(self.sent))
        error = exc if isinstance(exc, psycopg.Error) else psycopg.OperationalError(f"the connection broke: {exc!r}")
        while self.sent:
            _, future = self.sent.popleft()
            if not future.done():
                future.set_exception(error)
        # unregister the socket before it is closed: its number may be a new connection's next
        if self._writing:
            self._writing = False
            self.loop.remove_writer(self.fd)
        if (readable := self._readable) is not None:
            self._readable = None
            self.loop.remove_reader(self.fd)
            if not readable.done():
                readable.set_result(None)  # the reader finds the connection closed and ends
        if not self.conn.closed:
            self.pg.finish()

    def ended_while_idle(self) -> bool:
        """With no unit in flight, whether the server said something unasked — its error before
        it ends the connection (a restart, a terminated backend), and whatever else: the pipe is
        opened again rather than read. A socket poll."""
        try:
            return wire.ready(self.fd, wire.READ, 0)
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        self._break(psycopg.OperationalError("closed"), closing=True)


def connection_params() -> dict[str, Any]:
    """The default database's connection parameters, as Django would connect."""
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)  # Django's (sync) cursor class; a pipe uses none
    return params


def _log_refusal(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.info("a deferred write was refused: %s", future.exception())


class Pipes:
    """``size`` pipes on one event loop, opened all at once when the runner starts
    (``open_all``), or on first use; a turn's units always take the same one (``for_turn``)."""

    def __init__(self, size: int, params: Callable[[], dict[str, Any]] | None = None) -> None:
        """``params``: the connection's (default: Django's default database's)."""
        if size < 1:
            raise ValueError("a worker needs at least one store connection")
        self.size = size
        self.params = params or connection_params
        self._pipes: list[Pipe | None] = [None] * size
        self._opening: list[asyncio.Lock | None] = [None] * size

    async def for_turn(self, turn_id: str) -> Pipe:
        n = zlib.crc32(turn_id.encode()) % self.size
        pipe = self._pipes[n]
        if pipe is not None and pipe.usable:
            if pipe.sent or not pipe.ended_while_idle():
                return pipe
            pipe.close()  # the server ended it while nothing was in flight: open it again
        return await self._open(n)

    async def _open(self, n: int) -> Pipe:
        lock = self._opening[n]
        if lock is None:
            lock = self._opening[n] = asyncio.Lock()
        async with lock:  # one connect per slot, however many units ask at once
            pipe = self._pipes[n]
            if pipe is None or not pipe.usable:
                conn = await psycopg.AsyncConnection.connect(**self.params(), autocommit=True)
                pipe = self._pipes[n] = Pipe(conn)
        return pipe

    async def open_all(self) -> int:
        """Open every pipe not open yet, at once: a runner's start, so that its first turns do
        not wait for new connections (each a backend forked, authenticated and warmed). One
        that cannot be opened (the database is down) is logged and left to the first unit that
        needs it, which opens it as before. Returns how many are open."""
        opened = await asyncio.gather(
            *(self._open(n) for n, pipe in enumerate(self._pipes) if pipe is None or not pipe.usable),
            return_exceptions=True,
        )
        failed = [exc for exc in opened if isinstance(exc, Exception)]
        if failed:
            log.warning(
                "%d store connection(s) not opened at the start, opened at first use: %r", len(failed), failed[0]
            )
        return self.in_use()

    def in_use(self) -> int:
        return sum(1 for p in self._pipes if p is not None and p.usable)

    def close(self) -> None:
        for pipe in self._pipes:
            if pipe is not None:
                pipe.close()
        self._pipes = [None] * self.size
