"""The store's own PostgreSQL connection, for units of work that run no tool code.

A unit that only records what the engine did (a model step, an async tool's result, the
journal, the endings) needs nothing from Django's connection: it is one pipelined round trip of
the store's own statements. Handing it to asgiref's sync thread costs a thread hop each way,
which on a small machine costs as much as the round trip itself. So on PostgreSQL such a unit
runs on the event loop's thread, on a psycopg connection of its own (one per thread, in
autocommit mode, opened from the Django settings), and holds the loop for that one round trip.
A sync tool's unit still goes to the thread that owns the Django connection, so the tool's ORM
writes share the checkpoint's transaction; its turn's heartbeats run here meanwhile
(``lease.heartbeat_direct``), not behind it on that thread.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import psycopg
from django.db import connections
from psycopg.pq import TransactionStatus

from sessions_app.store import transcripts, wire


class _Local(threading.local):
    #: this thread's connection: a class default, so a thread that has none (every thread on
    #: SQLite, asked on every unit) reads None without an AttributeError raised and caught
    conn: psycopg.Connection | None = None


_local = _Local()
_opened: set[psycopg.Connection] = set()
_lock = threading.Lock()


@functools.cache
def _postgresql() -> bool:
    """Whether the default database is PostgreSQL (fixed for the process: asked on every unit,
    and ``connections[...]`` is an asgiref Local lookup that costs more than the answer)."""
    return connections["default"].vendor == "postgresql"


def connection() -> psycopg.Connection | None:
    """This thread's connection, opened on first use; None when the database is not PostgreSQL."""
    conn = _local.conn
    if conn is not None and not conn.closed and not conn.broken:
        return conn
    if not _postgresql():
        return None
    wrapper = connections["default"]
    params = wrapper.get_connection_params()
    params.pop("cursor_factory", None)
    params["prepare_threshold"] = None  # as Django's: checkpoint.preparing() decides
    conn = psycopg.connect(**params, autocommit=True)
    _local.conn = conn
    with _lock:
        _opened.add(conn)
    return conn


def ended_while_idle(conn: Any) -> bool:
    """Whether a psycopg connection that should be idle shows the server ended it (or said
    anything unasked): it is broken or in a transaction, or its socket is readable. A server that
    ends a connection (a restart, a terminated backend) sends its error and closes the socket,
    which makes it readable; a socket poll, no round trip."""
    if conn is None or conn.closed:
        return False
    if conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
        return True
    try:
        return wire.ready(conn.fileno(), wire.READ, 0)
    except (OSError, ValueError):
        return True


def drop_unusable() -> None:
    """Close this thread's connection if the server went away (a worker calls it per task)."""
    conn = _local.conn
    if conn is None or conn.closed:
        return
    try:
        wire.drain(conn)
        conn.execute("SELECT 1")
    except psycopg.Error:
        conn.close()


def close_all() -> None:
    """Close every thread's connection (tests, before the test database is flushed or dropped),
    and forget the transcripts read through them."""
    transcripts.clear()
    with _lock:
        opened = list(_opened)
        _opened.clear()
    for conn in opened:
        conn.close()
