"""The store's own SQLite connections (``lite``'s design is in its docstring): one per thread,
never shared, dropped with its thread; the cursor that takes the store's ``%s`` statements; a
write unit's ``BEGIN IMMEDIATE`` block that raises ``Busy`` (nothing written) when another
connection holds the write lock; and whether a call may run here at all (``here``)."""

from __future__ import annotations

import contextvars
import functools
import logging
import re
import sqlite3
import threading
import weakref
from typing import Any, cast

from asgiref.sync import AsyncToSync
from django.db import connections

from sessions_app.store import lite_wal, transcripts


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
    return wrapper.vendor == "sqlite" and not in_memory(wrapper.settings_dict["NAME"])


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


def in_memory(name: Any) -> bool:
    name = str(name)
    return name == ":memory:" or "mode=memory" in name


def _connection() -> sqlite3.Connection:
    own = _local.own
    if own is not None and own.epoch == _epoch:
        return own.conn
    settings = connections["default"].settings_dict
    path = str(settings["NAME"])
    try:
        conn = lite_wal.open_file(path, settings.get("OPTIONS", {}).get("init_command", ""))
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise Busy(str(exc)) from exc
        raise
    own = _local.own = _Own(conn, path, lite_wal.file_inode(path), _epoch)
    with _lock:
        _opened.add(own)
    lite_wal.checkpoints.request(path)  # what the WAL holds already (a migration's pages) goes first
    return conn


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    )


@functools.lru_cache(maxsize=256)  # a checkpoint's fence is built per unit from a few shapes
def qmark(sql: str) -> str:
    """``%s`` placeholders (the ORM's style, shared with Django's connection) -> ``?``."""
    return re.sub(r"(?<!%)%s", "?", sql).replace("%%", "%")


class Cursor(sqlite3.Cursor):
    """A cursor that takes the store's ``%s`` statements, as Django's SQLite cursor does."""

    def execute(self, sql: str, params: Any = ()) -> Cursor:
        return super().execute(qmark(sql), params)

    def executemany(self, sql: str, rows: Any) -> Cursor:
        return super().executemany(qmark(sql), rows)


class LiteCursor:
    """``with LiteCursor(begin) as cur``: a cursor on this thread's connection; ``begin`` opens a
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
            own = cast(_Own, _local.own)  # opened by __enter__
            lite_wal.checkpoints.wrote(own.path)

    def _failed(self, exc: BaseException) -> None:
        """Roll back; a locked database raises Busy (the caller re-raises anything else)."""
        self.cur.close()
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        if _busy(exc):
            raise Busy(str(exc)) from exc


def write_cursor() -> LiteCursor:
    return LiteCursor("BEGIN IMMEDIATE")


def drop_unusable() -> None:
    """Close this thread's connection if its file was deleted or replaced (a test database
    dropped and created again): an open connection would keep writing to the deleted file;
    and the transcripts read from it (``transcripts``) are another database's."""
    own = _local.own
    if own is not None and own.epoch == _epoch and own.inode is not None and lite_wal.file_inode(own.path) != own.inode:
        _local.own = None  # closes it
        transcripts.clear()


def close_all() -> None:
    """Close every thread's connection (tests, before the test database is flushed or dropped;
    a worker after a failed task), and forget the transcripts read through them. Call it while
    no unit runs on them; each thread opens a new one on its next call."""
    global _epoch
    transcripts.clear()
    lite_wal.checkpoints.forget()
    with _lock:
        _epoch += 1
        opened = list(_opened)
        _opened.clear()
    for own in opened:
        own.conn.close()
