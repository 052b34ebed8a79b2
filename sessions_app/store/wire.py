"""A checkpoint's statements in one libpq pipeline: one write, one read.

psycopg's pipeline mode sends each statement as it is queued and runs its adapters and
generators around every one; for the handful of small statements of a checkpoint that costs more
than the round trip itself. ``Batch`` talks to the connection's libpq handle directly: prepared
statements (the same name on every connection, prepared there on first use), text parameters
cast in the SQL, everything sent at once behind one Sync, the results read back in order.

Between two Syncs PostgreSQL runs the statements in one implicit transaction: it commits at the
Sync if every statement succeeded and rolls all of them back if one failed. So a batch on a
connection with no transaction open needs no BEGIN and no COMMIT; inside a transaction that a
sync tool's ORM writes began, the batch ends with COMMIT and a failure leaves the transaction
for its owner (Django's atomic block) to roll back.

``Batch.defer()`` sends a batch and leaves its results on the connection: the next batch on that
connection reads them first. The advisory provider_started journal write of a model step that no
checkpoint announced (``docs/workers.md``, the journal) rides along that way,
at no round trip of its own; its failure (a lost lease) is logged, and the next checkpoint's
fence refuses the attempt anyway.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import select
import uuid
import weakref
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Callable, Generator, Sequence, TypeVar

import psycopg
from psycopg import errors, pq

log = logging.getLogger(__name__)
T = TypeVar("T")

COMMAND_OK = pq.ExecStatus.COMMAND_OK
FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
PIPELINE_OFF = pq.PipelineStatus.OFF
UNKNOWN_STATEMENT = "26000"  # invalid_sql_statement_name: a prepared statement is gone

_names: dict[bytes, bytes] = {}  # statement text -> its prepared name, the same on every connection
#: sent once on a connection, before its first preparation (a segment of its own): its prepared
#: statements run their generic plan from their first execution. By default PostgreSQL plans the
#: first five executions of each one anew with their parameters (and on a fresh connection each
#: costs about twice its generic execution) before it settles on the generic plan these
#: statements take anyway: each picks its rows by a primary or unique key, and the partial
#: indexes' conditions are written as literals (``checkpoint.IN_CHAIN``). A burst that grows a
#: pool spread its starts over connections that each ran a handful of them: all planned anew.
GENERIC_PLANS = b"SET plan_cache_mode = force_generic_plan"


def _name(sql: bytes) -> bytes:
    """A name derived from the text itself: threads filling the cache at once agree on it."""
    name = _names[sql] = b"june_" + hashlib.blake2b(sql, digest_size=8).hexdigest().encode()
    return name


class PipeState:
    """What a connection has prepared, and the deferred batches whose results it has not read."""

    __slots__ = ("prepared", "pending")

    def __init__(self) -> None:
        self.prepared: set[bytes] = set()
        self.pending: list[list[tuple[str, Any]]] = []


_states: weakref.WeakKeyDictionary[Any, PipeState] = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=256)  # a checkpoint's fence is built per unit from a few shapes
def numbered(sql: str) -> bytes:
    """``%s`` placeholders (the ORM's style, shared with the SQLite path) -> ``$1, $2, ...``."""
    parts = sql.split("%s")
    out = [parts[0]]
    for n, part in enumerate(parts[1:], 1):
        out.append(f"${n}{part}")
    return "".join(out).encode()


def param(value: Any) -> bytes | None:
    """A parameter's text, as the batch sends it (the SQL casts it)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (datetime, date, time)):  # (before the numbers: none is one)
        return value.isoformat().encode()
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()
    if isinstance(value, (uuid.UUID, Decimal)):  # a user model's primary key may be either
        return str(value).encode()
    raise TypeError(f"cannot send {type(value).__name__} as a checkpoint parameter")


class Batch:
    """Statements sent as one pipeline segment; ``run()`` returns one result per statement."""

    def __init__(self, conn: psycopg.Connection | None = None, *, prepare: bool = True) -> None:
        self.conn = conn  # None: a unit's batch (``drive``, ``pipes``) gets its connection when it runs
        self.prepare = prepare
        self.commands: list[tuple[bytes, list[bytes | None]]] = []

    def _conn(self) -> psycopg.Connection:
        if self.conn is None:  # a unit's batch is given its connection before it runs
            raise RuntimeError("this batch has no connection yet")
        return self.conn

    def add(self, sql: bytes, params: Sequence[Any] = ()) -> int:
        """Queue a statement (``$n`` placeholders); returns the index of its result."""
        # a plain ``str`` or ``int`` or None, most of a checkpoint's parameters, as ``param``
        # sends them without a call to it each
        sent = [
            p.encode()
            if (kind := p.__class__) is str
            else b"%d" % p
            if kind is int
            else None
            if p is None
            else param(p)
            for p in params
        ]
        self.commands.append((sql, sent))
        return len(self.commands) - 1

    def run(self) -> list[pq.abc.PGresult]:
        """Send, read every result (a deferred batch's first), and raise the first error."""
        conn = self._conn()
        state = _state(conn)
        pg = conn.pgconn
        expected = self.send(pg, state)
        _wait(_flush(pg), pg.socket)
        _read_deferred(pg, state)
        results, error = _wait(read_results(pg, expected, state), pg.socket)
        pg.exit_pipeline_mode()
        if error is not None:
            raise error
        return results

    def defer(self) -> None:
        """Send without waiting: the next ``run()`` (or ``drain()``) on the connection reads it."""
        conn = self._conn()
        state = _state(conn)
        pg = conn.pgconn
        state.pending.append(self.send(pg, state))
        _wait(_flush(pg), pg.socket)

    def send(self, pg: Any, state: PipeState, *, flush: bool = True) -> list[tuple[str, Any]]:
        """Queue the statements and their Sync on ``pg``; returns what to read back, in order.
        libpq's Sync writes what is queued to the socket; ``flush=False`` queues it without
        writing where libpq can (``queue_sync``), and the caller flushes: a pipe's units of one
        pass of its loop go out in one write (``pipes``)."""
        if pg.pipeline_status == PIPELINE_OFF:
            pg.enter_pipeline_mode()
        sync = pg.pipeline_sync
        if not flush:
            queued = queue_sync()
            if queued is not None:
                ptr = pg.pgconn_ptr
                sync = lambda: queued(ptr)  # noqa: E731
        expected: list[tuple[str, Any]] = []
        if not self.prepare:
            for sql, params in self.commands:
                pg.send_query_params(sql, params)
        else:
            names = [_names.get(sql) or _name(sql) for sql, _ in self.commands]
            if not state.prepared:  # this connection's first preparation (or the first since a DISCARD)
                pg.send_query_params(GENERIC_PLANS, [])
                sync()
                expected.append(("setting", None))
            for name, (sql, _) in zip(names, self.commands):
                if name not in state.prepared:
                    # first, each in a segment of its own: a failing statement of the batch
                    # cannot skip a preparation
                    pg.send_prepare(name, sql)
                    sync()
                    expected.append(("prepare", name))
                    state.prepared.add(name)
            for name, (_, params) in zip(names, self.commands):
                pg.send_query_prepared(name, params)
        sync()
        expected.append(("batch", None))
        return expected


_queue_sync: list[Callable[[int], int] | None] = []


def queue_sync() -> Callable[[int], int] | None:
    """libpq's ``PQsendPipelineSync`` (libpq 17 and later; psycopg does not expose it), called
    with a connection's ``pgconn_ptr``: a Sync queued in the output buffer, not written, where
    ``PQpipelineSync`` writes everything queued at once (a send to the server per unit). None
    where it cannot be found: the libpq psycopg loaded is looked up among the process's mapped
    files (Linux), or psycopg's own ctypes handle on it."""
    if not _queue_sync:
        _queue_sync.append(_find_queue_sync())
    return _queue_sync[0]


def _find_queue_sync() -> Callable[[int], int] | None:
    lib: Any = None
    try:
        if pq.__impl__ == "python":
            from psycopg.pq import _pq_ctypes

            lib = _pq_ctypes.pq  # type: ignore[attr-defined]  # (its ctypes handle on libpq)
        else:
            with open("/proc/self/maps") as maps:
                paths = {line.split()[-1] for line in maps if "/libpq" in line}
            found = sorted(p for p in paths if os.path.basename(p).startswith(("libpq.", "libpq-")))
            if len(found) != 1:
                return None  # none, or two libpqs: which one psycopg calls is not known
            # the GIL held: the call only appends to a buffer
            lib = ctypes.PyDLL(found[0])
        fn = lib.PQsendPipelineSync
    except (OSError, AttributeError, ImportError):
        return None
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int

    def call(ptr: int) -> int:
        if fn(ptr) != 1:
            raise psycopg.OperationalError("queuing a pipeline Sync failed")
        return 1

    return call


# -- waiting: the protocol's steps are generators that yield what they wait for (READ or
# WRITE on the connection's socket); ``_wait`` drives one with select() (a thread's blocking
# call), ``sessions_app.store.pipes`` with the event loop's readiness callbacks

READ, WRITE = 1, 2


def ready(fd: int, want: int = READ, timeout: float | None = None) -> bool:
    """Whether ``fd`` is readable (``READ``) or writable (``WRITE``) within ``timeout`` seconds
    (None: wait). ``poll``, not ``select``: a process serving a thousand sockets holds descriptors
    past ``select``'s FD_SETSIZE (1024), where ``select`` raises ValueError (a burst of 1,000
    POSTs answered 500 for a quarter of them, and every pooled connection above 1024 read as
    ended and was reopened)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN if want == READ else select.POLLOUT)
    return bool(poller.poll(None if timeout is None else int(timeout * 1000)))


def _wait(gen: Generator[int, None, T], fd: int) -> T:
    """Drive a protocol generator to its end, blocking this thread on ``fd``."""
    try:
        while True:
            ready(fd, next(gen))
    except StopIteration as stop:
        return stop.value


def _flush(pg: Any) -> Generator[int, None, None]:
    while pg.flush() == 1:
        yield WRITE


def read_results(
    pg: Any, expected: list[tuple[str, Any]], state: PipeState
) -> Generator[int, None, tuple[list[Any], Exception | None]]:
    """Read the results of one sent batch; returns (its statements' results, the first error)."""
    error: Exception | None = None
    results: list[Any] = []
    for kind, name in expected:
        segment = yield from _segment(pg)
        firsts = [rs[0] for rs in segment if rs]
        for r in firsts:
            if r.status == FATAL_ERROR and error is None:
                error = errors.error_from_result(r, encoding="utf-8")
                if error.sqlstate == UNKNOWN_STATEMENT:  # DEALLOCATE ALL / DISCARD ALL ran here
                    state.prepared.clear()
        if kind == "prepare":
            if not firsts or firsts[0].status != COMMAND_OK:
                state.prepared.discard(name)
        elif kind == "batch":
            results = firsts
    return results, error


def _segment(pg: Any) -> Generator[int, None, list[list[Any]]]:
    """Every statement's results up to the next Sync (each statement's list ends at a None)."""
    out: list[list[Any]] = []
    current: list[Any] = []
    while True:
        while pg.is_busy():
            yield READ
            pg.consume_input()
        r = pg.get_result()
        if r is None:
            out.append(current)
            current = []
        elif r.status == PIPELINE_SYNC:
            return out
        else:
            current.append(r)


def drive(conn: psycopg.Connection, steps: Generator[Batch, Any, T]) -> T:
    """Run a unit written as a generator of batches (it yields a ``Batch``, gets its results
    back, or the ``psycopg.Error`` it raised thrown in) on ``conn``, on this thread; the same
    unit runs on the event loop through ``pipes.Pipe.drive``."""
    try:
        batch = next(steps)
        while True:
            batch.conn = conn
            try:
                results = batch.run()
            except psycopg.Error as exc:
                batch = steps.throw(exc)
            else:
                batch = steps.send(results)
    except StopIteration as stop:
        return stop.value


def drain(conn: psycopg.Connection) -> None:
    """Read what deferred batches left on ``conn`` so psycopg can use it again."""
    state = _states.get(conn)
    if state is None or not state.pending:
        return
    _read_deferred(conn.pgconn, state)
    conn.pgconn.exit_pipeline_mode()


def _read_deferred(pg: Any, state: PipeState) -> None:
    earlier, state.pending = state.pending, []
    for deferred in earlier:
        _, error = _wait(read_results(pg, deferred, state), pg.socket)
        if error is not None:
            log.info("a deferred write was refused: %s", error)


def _state(conn: Any) -> PipeState:
    state = _states.get(conn)
    if state is None:
        state = _states[conn] = PipeState()
    return state


def value(result: Any, column: int, row: int = 0) -> str | None:
    raw = result.get_value(row, column)
    return None if raw is None else raw.decode()


def text(result: Any, column: int, row: int = 0) -> str:
    """A column the statement never leaves NULL, as text."""
    raw = result.get_value(row, column)
    if raw is None:
        raise ValueError(f"column {column} of row {row} is NULL")
    return str(raw.decode())


def number(result: Any, column: int, row: int = 0) -> int:
    """A column the statement never leaves NULL, as an integer."""
    return int(text(result, column, row))
