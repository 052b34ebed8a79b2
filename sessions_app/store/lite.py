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
``reads.state_of``, ``lease``, ``children.report_txn``), written with ``%s``; this connection's
cursor turns them into ``?`` once (cached), as Django's SQLite cursor does. A write unit opens
with ``BEGIN IMMEDIATE``, as Django's ``transaction_mode=IMMEDIATE`` does: it takes the database's
write lock at its start, so two writers never deadlock on a lock upgrade, and a fence that
matched no row (StaleAttemptError) rolls the whole unit back. SQLite has one write lock for the
whole database, so the store's lock order (session row, then its turns') holds trivially.

The WAL's checkpoints run off the units (``checkpoints``). SQLite's automatic checkpoint runs
on the connection whose COMMIT takes the WAL past 1,000 pages, inside that unit: it copies the
pages back to the database file and syncs it, and one turn in twenty or so took twice as long.
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
other host operations (``control``: a replace, cancel, answer, reset), an in-memory database
(another connection would see another database), and a coroutine a sync caller awaits through
``async_to_sync``: that caller's thread may hold a transaction these statements must see, so
they go there, as before.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
import queue
import re
import sqlite3
import threading
import urllib.parse
import weakref
from types import SimpleNamespace
from typing import Any

from asgiref.sync import AsyncToSync
from django.db import connection as django_connection
from django.db import connections
from django.db.models.fields import AutoFieldMixin

from agents_app.runtime import rules
from agents_app.runtime.errors import NotFound
from agents_app.runtime.seams import (Commit, Outcome, SessionRef, SessionStatus, TurnInput, TurnRecord, TurnState,
                                      TurnStatus)
from sessions_app import models as m
from sessions_app.store import checkpoint, checkpoint_plain, lease, reads, transcripts
from sessions_app.store.records import UnitWriter, loads, record_of


class Busy(Exception):
    """Another connection holds the write lock: nothing was written; run the unit elsewhere."""


class _Own:
    """This thread's connection and the file it opened. Dropped with its thread (the
    connection closes with it): a short-lived thread leaves nothing open behind."""

    __slots__ = ("conn", "path", "inode", "epoch", "__weakref__")

    def __init__(self, conn: sqlite3.Connection, path: str, inode: int | None, epoch: int) -> None:
        self.conn, self.path, self.inode, self.epoch = conn, path, inode, epoch

    def __del__(self) -> None:
        self.conn.close()


log = logging.getLogger(__name__)


class _Local(threading.local):
    #: this thread's connection: a class default, so a thread that has none reads None without
    #: an AttributeError raised and caught (asked on every unit and read)
    own: _Own | None = None


_local = _Local()
_opened: weakref.WeakSet[_Own] = weakref.WeakSet()
_lock = threading.Lock()
_epoch = 0  # bumped by close_all: every thread's connection is then closed and reopened on use


def here() -> bool:
    """Whether this call may run on this thread's own connection: the default database is an
    SQLite file, and no sync caller waits for this coroutine (see the module's docstring)."""
    if _waited_by_sync_caller():
        return False
    own = _local.own
    if own is not None and own.epoch == _epoch:
        return True
    wrapper = connections["default"]
    return wrapper.vendor == "sqlite" and not _in_memory(wrapper.settings_dict["NAME"])


_executors = AsyncToSync.executors
#: the context variable that holds ``AsyncToSync.executors``'s values in this context (asgiref's
#: ``Local``: a ``_CVar`` whose ``_data`` it is), when asgiref is laid out so; else None
_executors_var = getattr(getattr(_executors, "_storage", None), "_data", None)
if not isinstance(_executors_var, contextvars.ContextVar):
    _executors_var = None


def _waited_by_sync_caller() -> bool:
    """``AsyncToSync.executors.current`` is set: a sync caller waits for this coroutine through
    ``async_to_sync``. Asked first on every unit and read: where the context holds none of the
    Local's values (a worker's or a server's own loop), the answer is no without asgiref's
    lookup, which raises and catches an AttributeError that costs more than a statement."""
    if _executors_var is not None and _executors_var.get(None) is None:
        return False
    return getattr(_executors, "current", None) is not None


def _in_memory(name: Any) -> bool:
    name = str(name)
    return name == ":memory:" or "mode=memory" in name


def _connection() -> sqlite3.Connection:
    own = _local.own
    if own is not None and own.epoch == _epoch:
        return own.conn
    settings = connections["default"].settings_dict
    path = str(settings["NAME"])
    try:
        conn = _open(path, settings.get("OPTIONS", {}).get("init_command", ""))
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise Busy(str(exc)) from exc
        raise
    own = _local.own = _Own(conn, path, _inode(path), _epoch)
    with _lock:
        _opened.add(own)
    checkpoints.request()  # what the WAL holds already (a migration's pages) goes first
    return conn


def _open(path: str, init_command: str) -> sqlite3.Connection:
    """A connection to ``path`` with the pragmas of Django's (``foreign_keys``, then the
    settings' ``init_command``: WAL, synchronous=NORMAL)."""
    conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False, uri=True)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        for command in init_command.split(";"):
            if command := command.strip():
                conn.execute(command)
    except BaseException:
        conn.close()
        raise
    return conn


def _inode(path: str) -> int | None:
    """The file's identity (None: gone, or a ``file:`` URI, which is not a path)."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


@functools.lru_cache(maxsize=256)  # a checkpoint's fence is built per unit from a few shapes
def qmark(sql: str) -> str:
    """``%s`` placeholders (the ORM's style, shared with Django's connection) -> ``?``."""
    return re.sub(r"(?<!%)%s", "?", sql).replace("%%", "%")


class Cursor(sqlite3.Cursor):
    """A cursor that takes the store's ``%s`` statements, as Django's SQLite cursor does."""

    def execute(self, sql: str, params: Any = ()) -> "Cursor":
        return super().execute(qmark(sql), params)

    def executemany(self, sql: str, rows: Any) -> "Cursor":
        return super().executemany(qmark(sql), rows)


class _cursor:
    """``with _cursor(begin) as cur``: a cursor on this thread's connection; ``begin`` opens a
    transaction that commits when the block ends and rolls back when it raises. A locked
    database raises Busy (rolled back). (A class, not a generator: a generator's context
    manager ends by raising and catching a StopIteration, at every unit and read.)"""

    __slots__ = ("begin", "conn", "changes", "cur")

    def __init__(self, begin: str | None) -> None:
        self.begin = begin

    def __enter__(self) -> Cursor:
        conn = self.conn = _connection()
        self.changes = conn.total_changes
        cur = self.cur = conn.cursor(Cursor)
        if self.begin:
            try:
                cur.execute(self.begin)
            except BaseException as exc:
                self._failed(exc)
                raise
        return cur

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> None:
        if exc is not None:
            self._failed(exc)
            return
        conn = self.conn
        try:
            self.cur.close()
            if self.begin:
                conn.execute("COMMIT")
        except BaseException as error:
            self._failed(error)
            raise
        if conn.total_changes != self.changes:
            checkpoints.wrote()

    def _failed(self, exc: BaseException) -> None:
        """Roll back; a locked database raises Busy (the caller re-raises anything else)."""
        self.cur.close()
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        if _busy(exc):
            raise Busy(str(exc)) from exc


def _write() -> _cursor:
    return _cursor("BEGIN IMMEDIATE")


# -- units and calls ------------------------------------------------------------------------------

def commit(tx: UnitWriter) -> Commit:
    """A recorded unit (no children: a spawn goes through the ORM) as one transaction."""
    with _write() as cur:
        written = checkpoint_plain.write_plain(cur, tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages, tx.steps,
                                         tx.events, tx.moved, tx.result)
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
            return checkpoint_plain.write_plain(cur, tx.turn_id, tx.attempt_id, tx.turn_changes, tx.messages, tx.steps,
                                          tx.events, tx.moved, tx.result)
        finally:
            cur.close()


def journal(turn_id: str, attempt_id: str | None, changes: dict[str, Any]) -> None:
    with _cursor(None) as cur:  # one statement: its own transaction
        checkpoint_plain.write_journal(turn_id, attempt_id, changes, cur)


def load(turn_id: str) -> TurnState:
    with _cursor("BEGIN") as cur:  # one snapshot for the row, the steps and the transcript
        return reads.load_on(cur, _turn(cur, turn_id), held=True)


def get_turn(turn_id: str) -> TurnRecord:
    with _cursor(None) as cur:
        return record_of(_turn(cur, turn_id))


def next_queued(session: SessionRef) -> str | None:
    with _cursor(None) as cur:
        return reads.next_queued(session, cur)


def claim(turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float) -> TurnRecord | None:
    """``lease.claim`` in one transaction: the claim, the row, the session marked running."""
    with _write() as cur:
        turn = _claimed(cur, turn_id, owner, attempt_id, now, lease_seconds)
        return None if turn is None else record_of(turn)


def claim_and_load(turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float,
                   opening: Any = None) -> TurnState | None:
    """``claim`` and ``load`` in one transaction (``SessionStore.claim_and_load``), and the
    opening's unit when ``opening`` offers one for the loaded state: written as ``commit``
    writes it (``checkpoint_plain.write_plain``, fenced on this attempt), before the same COMMIT."""
    with _write() as cur:
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
        written = checkpoint_plain.write_plain(cur, turn_id, attempt_id, tx.turn_changes, tx.messages, tx.steps,
                                         tx.events, tx.moved, tx.result)
    transcripts.wrote((written.session_id, written.generation), tx.messages, written.rows, turn_id)  # committed
    state.opened = Commit(events=written.events, cancel_reason=written.cancel_reason, runnable=written.runnable)
    return state


def _claimed(cur: "Cursor", turn_id: str, owner: str, attempt_id: str, now: float,
             lease_seconds: float) -> SimpleNamespace | None:
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
    with _cursor(None) as cur:
        return lease.heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds, cur=cur)


def release(turn_id: str, *, attempt_id: str) -> None:
    with _cursor(None) as cur:
        lease.release(turn_id, attempt_id=attempt_id, cur=cur)


def create_turn(session: SessionRef, input: TurnInput, *, turn_id: str, policy: dict[str, Any] | None = None,
                created_by: Any = None) -> Outcome:
    """``control.create_turn`` without a replace (which cascades through the ORM), as plain
    statements in one transaction: the session (created, owned by ``created_by``, if new; the
    write lock serializes starts as the session's row lock does on PostgreSQL), its next place
    in the chain with its status and the rules' check in one statement, the queued turn; its
    record is built from what was written, not read back."""
    now = checkpoint.plain_now()
    owner = None if created_by is None else getattr(created_by, "pk", None)
    # nothing parked (check_start) and a queued turn: the status the recompute would give
    # (``checkpoint.session_status_sql``); a start the rules refuse rolls it back with the rest
    facts = [now, str(SessionStatus.RUNNING), session.agent, session.key, turn_id]
    with _write() as cur:
        row = cur.execute(NEXT_IN_CHAIN, facts).fetchone()
        if row is None:
            _insert(cur, m.Session, agent=session.agent, key=session.key, owner_id=owner, created_at=now,
                    updated_at=now)
            row = cur.execute(NEXT_IN_CHAIN, facts).fetchone()
        session_id, generation, order, exists, parked = row
        rules.check_start(turn_exists=bool(exists), parked=bool(parked))
        stored_input = checkpoint.dumps(input.to_json())
        stored_policy = None if policy is None else checkpoint.dumps(policy)
        _insert(cur, m.Turn, id=turn_id, session_id=session_id, order=order, generation=generation,
                status=str(TurnStatus.QUEUED), kind=input.kind, source=input.source or "",
                input=stored_input, policy=stored_policy, created_by_id=owner, created_at=now, updated_at=now)
    # the row as ``record_of`` reads it: the model's defaults for the rest
    return Outcome(turn=TurnRecord(turn_id=turn_id, session=SessionRef(session.agent, session.key),
                                   status=TurnStatus.QUEUED, input=TurnInput.from_json(loads(stored_input)),
                                   generation=generation, policy=None if policy is None else loads(stored_policy)))


#: the session's next place in the chain, with its status, and rules.check_start's two facts:
#: the id is taken; the live generation has a parked turn
NEXT_IN_CHAIN = ("UPDATE sessions_app_session SET turn_seq = turn_seq + 1, updated_at = %s, status = %s "
                 "WHERE agent = %s AND key = %s RETURNING id, generation, turn_seq, "
                 "EXISTS (SELECT 1 FROM sessions_app_turn WHERE id = %s), "
                 "EXISTS (SELECT 1 FROM sessions_app_turn t WHERE t.session_id = sessions_app_session.id "
                 f"AND t.status = '{TurnStatus.SUSPENDED.value}' AND t.waiting = 0 "
                 "AND t.generation = sessions_app_session.generation)")


@functools.cache
def _inserting(model: type) -> tuple[str, tuple[str, ...], tuple[Any, ...]]:
    """An INSERT of a whole ``model`` row (its auto id aside): the statement, the fields'
    attnames, and their defaults as the ORM saves them (the model stays their one source)."""
    fields = [f for f in model._meta.concrete_fields if not isinstance(f, AutoFieldMixin)]
    columns = ", ".join(f'"{f.column}"' for f in fields)
    sql = f"INSERT INTO {model._meta.db_table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    defaults = tuple(f.get_db_prep_save(f.get_default(), django_connection) for f in fields)
    return sql, tuple(f.attname for f in fields), defaults


def _insert(cur: "Cursor", model: type, **values: Any) -> None:
    """``values``: by attname, as the database takes them; the other fields get their defaults."""
    sql, names, defaults = _inserting(model)
    assert values.keys() <= set(names), set(values) - set(names)
    cur.execute(sql, [values[n] if n in values else d for n, d in zip(names, defaults)])


# -- a turn's row, as record_of and reads.state_of read it ----------------------------------------

_TURN = ("id", "status", "input", "generation", "cancel_reason", "attempt_id", "attempts", "lease_owner",
         "lease_expires_at", "phase", "journal", "pending", "policy", "text", "error", "usage", "parent_id",
         "depth", "waiting", "session_id", "spawn_step")
_SESSION = ("agent", "key", "status", "generation", "boundary", "summary_index")
_JSON = frozenset({"input", "journal", "pending", "policy", "error", "usage"})
TURN = (f"SELECT {', '.join('t.' + c for c in _TURN)}, {', '.join('s.' + c for c in _SESSION)} "
        "FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id WHERE t.id = %s")


#: ``lease.CLAIM`` that answers the claimed row as ``TURN`` reads it (its session's columns
#: by the row's key: a RETURNING clause reads no join)
CLAIMED = (f"{lease.CLAIM.rstrip()} RETURNING {', '.join(_TURN)}, "
           + ", ".join(f"(SELECT s.{c} FROM sessions_app_session s WHERE s.id = sessions_app_turn.session_id)"
                       for c in _SESSION))


def _turn(cur: Cursor, turn_id: str) -> SimpleNamespace:
    """The turn's row with its ``session`` (the attributes of ``models.Turn`` that
    ``records.record_of`` and ``reads.state_of`` read; JSON columns decoded as Django does)."""
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
    turn.session = SimpleNamespace(**dict(zip(_SESSION, row[len(_TURN):])))
    return turn


# -- the WAL's checkpoints --------------------------------------------------------------------------

#: commits on the store's connections between two checkpoints: a unit writes a few pages (a
#: 3-step turn about 40 over its 8 commits), so the WAL starts over at about 500 pages, before
#: SQLite's automatic checkpoint (1,000 pages) would run in a unit
CHECKPOINT_EVERY = 96


class _Kept:
    """A connection of the checkpoints' thread, the file it opened (its inode: a file dropped
    and created again is another database, which gets a connection of its own), and the
    ``forget`` it was opened after (one opened before the last is closed when next seen)."""

    __slots__ = ("conn", "path", "inode", "epoch")

    def __init__(self, conn: sqlite3.Connection, path: str, inode: int | None, epoch: int) -> None:
        self.conn, self.path, self.inode, self.epoch = conn, path, inode, epoch


class _Checkpoints:
    """The WAL's checkpoints, off the units: the process's thread moves the bulk of the WAL to
    the database (``checkpoint_wal``), then the next commit here moves the few pages committed
    in the meantime, on the thread's connection. The WAL starts over from its beginning only
    once every page in it was moved, at the next write: while units commit without a pause,
    the thread alone would never get there. The thread starts with the first request; it
    waits on its queue of database files, so it costs nothing while no unit commits.

    The thread keeps its connection for the next checkpoint of the same file: a connection's
    first statement reads the whole schema (2M instructions for this site's, once every
    ``CHECKPOINT_EVERY`` commits when each checkpoint opened its own)."""

    def __init__(self) -> None:
        self.commits = 0
        self.thread: threading.Thread | None = None
        #: what the thread does: a checkpoint of a file (path, init_command), a connection lent
        #: for the rest and given back (kept for the next), None: close the kept ones (``forget``)
        self.files: queue.SimpleQueue[tuple[str, str] | _Kept | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        #: the thread's connection once it moved the bulk: the next commit moves the rest on it
        self.rest: _Kept | None = None
        #: by file: the thread's connections, not lent (only the thread touches it; here, not in
        #: its frame, so a forked child keeps them referenced with the rest: ``_after_fork``)
        self.idle: dict[str, _Kept] = {}
        #: ``forget``s so far: a connection in the thread's hands at one is closed when it is done
        self.epoch = 0

    def wrote(self) -> None:
        """A commit on this thread's connection (the count is shared by the threads without a
        lock: a lost increment only delays a checkpoint)."""
        if self.rest is not None and self.lock.acquire(blocking=False):
            kept, self.rest = self.rest, None
            self.lock.release()
            if kept is not None:
                try:
                    kept.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error as exc:  # the unit committed: the next request tries again
                    log.warning("SQLite checkpoint: %s", exc)
                finally:
                    self.files.put(kept)  # back to the thread, for its next checkpoint
        self.commits += 1
        if self.commits >= CHECKPOINT_EVERY:
            self.commits = 0
            self.request()

    def forget(self) -> None:
        """Close the checkpoints' connections (``close_all``): the rest lent to a commit here,
        the thread's kept ones there."""
        with self.lock:
            kept, self.rest = self.rest, None
            self.epoch += 1
        if kept is not None:
            kept.conn.close()
        if self.thread is not None:
            self.files.put(None)

    def request(self) -> None:
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self.run, name="june-sqlite-checkpoints", daemon=True)
                    self.thread.start()
        init_command = connections["default"].settings_dict.get("OPTIONS", {}).get("init_command", "")
        self.files.put((_local.own.path, init_command))

    def run(self) -> None:
        idle = self.idle
        while True:
            item = self.files.get()
            if item is None:
                for kept in idle.values():
                    kept.conn.close()
                idle.clear()
                continue
            if isinstance(item, _Kept):
                self._keep(item)
                continue
            path, init_command = item
            kept = idle.pop(path, None)
            if kept is None:
                with self.lock:  # lent for a rest no commit took yet: this checkpoint moves it
                    if self.rest is not None and self.rest.path == path:
                        kept, self.rest = self.rest, None
            if kept is not None and (kept.epoch != self.epoch or kept.inode is None or _inode(path) != kept.inode):
                kept.conn.close()  # forgotten, or another file by that name now
                kept = None
            try:
                if kept is None:
                    epoch = self.epoch
                    inode = _inode(path)  # before the open: a file replaced between them is opened again
                    conn, busy = checkpoint_wal(path, init_command)
                    kept = _Kept(conn, path, inode, epoch)
                else:
                    busy = checkpoint_passes(kept.conn)
            except sqlite3.Error as exc:  # the next request tries again, on a new connection
                log.warning("SQLite checkpoint of %s: %s", path, exc)
                if kept is not None:
                    kept.conn.close()
                continue
            if busy:  # another connection was checkpointing: it moves the rest
                self._keep(kept)
                continue
            with self.lock:
                if kept.epoch == self.epoch:
                    kept, self.rest = self.rest, kept
            if kept is not None:  # forgotten meanwhile, or a rest no commit took (a later checkpoint moves its pages)
                self._keep(kept)

    def _keep(self, kept: _Kept) -> None:
        """Keep ``kept`` for its file's next checkpoint, unless it was forgotten or one is kept
        for that file already (the thread's)."""
        if kept.epoch != self.epoch or kept.path in self.idle:
            kept.conn.close()
        else:
            self.idle[kept.path] = kept


#: PASSIVE checkpoints the thread runs in a row, each moving what units committed during the
#: one before (fewer pages each time): the commit that moves the rest then has little to move
CHECKPOINT_PASSES = 3


def checkpoint_wal(path: str, init_command: str) -> tuple[sqlite3.Connection, bool]:
    """PASSIVE checkpoints of ``path`` (``checkpoint_passes``) on a connection of its own; the
    connection, with whether another checkpoint was running. The file is opened read-write,
    never created: a test database dropped in the meantime stays dropped."""
    uri = path if path.startswith("file:") else f"file:{urllib.parse.quote(path)}?mode=rw"
    conn = _open(uri, init_command)
    try:
        busy = checkpoint_passes(conn)
    except BaseException:
        conn.close()
        raise
    return conn, busy


def checkpoint_passes(conn: sqlite3.Connection) -> bool:
    """PASSIVE checkpoints (they take no lock a writer waits for) until one found no page
    committed since the one before (or ``CHECKPOINT_PASSES``); whether another checkpoint was
    running."""
    seen = None
    for _ in range(CHECKPOINT_PASSES):
        busy, wal, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if busy or wal == seen:
            break
        seen = wal
    return bool(busy)


checkpoints = _Checkpoints()
_inherited: list[_Checkpoints] = []


def _after_fork() -> None:
    """A forked child inherits the parent's checkpoints but not their thread, nor the use of
    the parent's connection (SQLite's rule): it starts its own, and never closes the parent's
    (closing it here could undo what the parent holds)."""
    global checkpoints
    _inherited.append(checkpoints)
    checkpoints = _Checkpoints()


os.register_at_fork(after_in_child=_after_fork)


# -- connections ------------------------------------------------------------------------------------

def drop_unusable() -> None:
    """Close this thread's connection if its file was deleted or replaced (a test database
    dropped and created again): an open connection would keep writing to the deleted file;
    and the transcripts read from it (``transcripts``) are another database's."""
    own = _local.own
    if own is not None and own.epoch == _epoch and own.inode is not None and _inode(own.path) != own.inode:
        _local.own = None  # closes it
        transcripts.clear()


def close_all() -> None:
    """Close every thread's connection (tests, before the test database is flushed or dropped;
    a worker after a failed task), and forget the transcripts read through them. Call it while
    no unit runs on them; each thread opens a new one on its next call."""
    global _epoch
    transcripts.clear()
    checkpoints.forget()
    with _lock:
        _epoch += 1
        opened = list(_opened)
        _opened.clear()
    for own in opened:
        own.conn.close()
