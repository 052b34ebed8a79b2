"""django-q2's ORM broker, woken by PostgreSQL ``NOTIFY`` instead of sleeping out the poll.

The ORM broker's pusher looks at the queue, and when it is empty sleeps ``Conf.POLL`` before
looking again: that sleep is the floor of queued -> started. ``NotifyingORM`` keeps the queue,
the claim and the acknowledgement as django-q2 has them (a task row claimed by locking it for
``Conf.RETRY``, deleted on acknowledge: at-least-once) and changes these things:

- ``enqueue`` inserts the row and sends ``pg_notify(channel)`` in one statement, so in one
  transaction (the caller's, when there is one): PostgreSQL delivers the notification at that
  commit, never before the row is visible, and drops it with a rollback.
- ``dequeue`` on an empty queue waits on a dedicated ``LISTEN`` connection for at most
  ``JUNE_Q_LISTEN_POLL`` (1 s; never less than ``Conf.POLL``) instead of sleeping ``Conf.POLL``,
  then looks again: a notification ends the wait at once, so the poll is only the fallback for
  a lost one (those looks, each a statement on the pusher's connection, were most of an idle
  cluster's CPU at ``Conf.POLL``: docs/workers.md). Its queue queries keep the pusher's connection open
  (the ORM broker reconnects for every look and every claim when ``CONN_MAX_AGE`` is 0), and so
  does ``acknowledge``, the monitor's delete of a finished task's row (two connects per task
  otherwise: its ``close_old_connections`` closes the connection it has just opened).
- The pusher's look and claim are one statement (``CLAIM_NEXT``: the oldest unlocked rows,
  locked ``FOR UPDATE SKIP LOCKED`` and re-checked under the lock, so a row another cluster is
  claiming is skipped as django-q2's conditional claim skips it), and the monitor's
  acknowledgement one ``DELETE`` by primary key: django-q2 spent a read, an ``UPDATE`` and the
  ORM's query building per task on them.
- Nothing closes the caller's connection: django-q2 makes a broker for every ``async_task``
  and its ``get_connection`` first closes the calling thread's connection when it is past
  ``CONN_MAX_AGE`` (with 0: always), so every enqueue cost its caller a reconnect — a web
  request's, and a worker's store connection at each task it enqueued.

A lost notification (the listener down at enqueue time, a server restart) costs at most one
listening poll interval: the look after the wait finds the row. While the listener cannot connect
(retried every ``RECONNECT_SECONDS``), ``dequeue`` is django-q2's own.

On SQLite there is no ``NOTIFY``: ``dequeue`` looks at the queue only when ``PRAGMA data_version``
on the pusher's connection moved (another connection committed: an idle look is one statement
answered from memory, as the turns' taker waits), when its last look found tasks, or once every
``JUNE_Q_LISTEN_POLL`` (a claimed task whose lock ran out commits nothing); otherwise it sleeps
``Conf.POLL``. django-q2's look reconnected and ran its query every ``Conf.POLL``. On any other
database ``dequeue`` is django-q2's own.
"""

from __future__ import annotations

import logging
import os
import select
import time
from datetime import timedelta
from typing import Callable, TypeVar

from django import db
from django.conf import settings
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from psycopg import sql

log = logging.getLogger(__name__)
T = TypeVar("T")

#: seconds between attempts to (re)connect a broken listener; polling covers the gap
RECONNECT_SECONDS = 1.0


#: the ORM broker's row (key, payload, lock = now) and the queue's notification, in one statement
INSERT_NOTIFY = (
    'WITH task AS (INSERT INTO {table} ("key", payload, lock) VALUES (%s, %s, %s) RETURNING id) '
    "SELECT id, pg_notify(%s, '') FROM task"
)
#: django-q2's read of unlocked rows and its conditional claim of each, as one statement: the
#: rows are locked (``SKIP LOCKED``: one another cluster is claiming is skipped, as django-q2's
#: claim skips a row whose lock moved) and re-checked under the lock, so a row is claimed once
CLAIM_NEXT = (
    'UPDATE {table} SET lock = %s WHERE id IN (SELECT id FROM {table} WHERE "key" = %s AND lock < %s '
    "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, payload"
)
ACKNOWLEDGE = "DELETE FROM {table} WHERE id = %s"


def channel_for(list_key: str) -> str:
    """The notification channel of a queue (a PostgreSQL identifier: at most 63 bytes)."""
    return f"django_q.{list_key}"[:63]


class Listener:
    """One psycopg connection in autocommit that ``LISTEN``s on a channel."""

    def __init__(self, channel: str, application_name: str = "june-q2-listener") -> None:
        import psycopg

        params = db.connections[Conf.ORM].get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold"):  # Django's adapters: not needed
            params.pop(key, None)
        params.setdefault("application_name", application_name)
        params.setdefault("connect_timeout", 5)
        # an idle connection that died without a word is noticed within minutes, not hours
        params.setdefault("keepalives_idle", 60)
        params.setdefault("keepalives_interval", 10)
        params.setdefault("keepalives_count", 3)
        self.conn = psycopg.connect(autocommit=True, **params)
        try:
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            self.conn.close()
            raise

    @property
    def backend_pid(self) -> int:
        return self.conn.info.backend_pid

    def wait(self, timeout: float) -> bool:
        """Block until a notification arrives or ``timeout`` passes; True when one arrived.
        Notifications queued meanwhile are drained (one look at the queue serves them all).
        Raises psycopg's error when the connection is broken."""
        woken = self._drain()
        if not woken:
            # one poll(2) for the whole wait: psycopg's own wait (``notifies(timeout=…)``) wakes
            # its thread every 0.1 s to look for a Ctrl-C, an idle listener's every wake-up a
            # thread's CPU for nothing
            ready = select.poll()
            ready.register(self.conn.fileno(), select.POLLIN)
            if ready.poll(max(timeout, 0.0) * 1000):  # readable, or hung up / in error
                woken = self._drain()
        return woken

    def _drain(self) -> bool:
        """Read what the connection has (without waiting); True when it held a notification.
        Raises psycopg's error when the connection is broken."""
        woken = False
        for _ in self.conn.notifies(timeout=0):
            woken = True
        return woken

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # closing a broken connection: nothing left to release
            pass


def _kept(statement: Callable[[], T]) -> T:
    """Run ``statement`` on the process's open connection (outside a transaction); a broken
    connection is replaced once, so only statements safe to repeat go through here (a read, a
    delete by primary key)."""
    for retry in (False, True):
        try:
            return statement()
        except (db.InterfaceError, db.OperationalError):
            if retry:
                raise
            db.connections[Conf.ORM].close()
    raise AssertionError("unreachable")


def _data_version() -> int:
    """SQLite's ``PRAGMA data_version`` on this thread's connection: it moves only when another
    connection commits (read on the sqlite3 connection itself: no cursor wrapper per look)."""
    connection = db.connections[Conf.ORM]
    connection.ensure_connection()
    return connection.connection.execute("PRAGMA data_version").fetchone()[0]


class NotifyingORM(ORM):
    """The ORM broker with a ``LISTEN``/``NOTIFY`` wake-up on PostgreSQL (see the module)."""

    _listener: Listener | None = None
    _listener_pid: int | None = None
    _retry_at = 0.0
    #: SQLite: ``PRAGMA data_version`` at the last look, and when the next look is due anyway
    _version: int | None = None
    _look_at = 0.0

    @property
    def channel(self) -> str:
        return channel_for(self.list_key or Conf.CLUSTER_NAME)

    def info(self) -> str:
        if not self._info:
            self._info = f"ORM {Conf.ORM} + LISTEN/NOTIFY" if self._on_postgresql() else f"ORM {Conf.ORM}"
        return self._info

    @staticmethod
    def _on_postgresql() -> bool:
        return db.connections[Conf.ORM].vendor == "postgresql"

    @staticmethod
    def _on_sqlite() -> bool:
        return db.connections[Conf.ORM].vendor == "sqlite"

    def get_connection(self, list_key: str | None = None):
        """The queue's manager, the caller's connection left as it is (see the module). A
        broken connection is replaced where the broker queries (``_kept``); the callers' own
        checks (a request's end, the store's per-task check) replace theirs."""
        return OrmQ.objects.using(Conf.ORM)

    def enqueue(self, task):
        if not self._on_postgresql():
            return super().enqueue(task)
        connection = db.connections[Conf.ORM]
        if (
            connection.connection is not None
            and not connection.in_atomic_block
            and connection.errors_occurred
            and not connection.is_usable()
        ):
            # the ORM broker closes every obsolete connection here, which with CONN_MAX_AGE=0 is
            # every connection: a reconnect per enqueue. Only a broken one is replaced.
            connection.close()
        # one statement, so one transaction even in autocommit: the row and its notification
        # commit together (inside the caller's transaction: at its commit)
        table = connection.ops.quote_name(OrmQ._meta.db_table)
        row = [self.list_key or Conf.CLUSTER_NAME, task, timezone.now()]
        with connection.cursor() as cursor:
            cursor.execute(INSERT_NOTIFY.format(table=table), [*row, self.channel])
            return cursor.fetchone()[0]

    def dequeue(self):
        if self._on_sqlite():
            return self._dequeue_sqlite()
        listener = self._ensure_listener()
        if listener is None:
            return _kept(super().dequeue)  # polling: the listener is down, or another database
        claimed = self._claim_next()
        if claimed:
            return claimed
        try:
            listener.wait(max(Conf.POLL, settings.JUNE_Q_LISTEN_POLL))
        except Exception:
            log.warning("queue listener lost; polling until it reconnects", exc_info=True)
            self.close_listener()
            self._retry_at = time.monotonic() + RECONNECT_SECONDS
        return None

    def _dequeue_sqlite(self):
        """django-q2's look, only when something may have changed (see the module)."""
        version = _kept(_data_version)
        now = time.monotonic()
        if version == self._version and now < self._look_at:
            time.sleep(Conf.POLL)
            return None
        self._version = version
        tasks = _kept(super().dequeue)  # (it sleeps ``Conf.POLL`` when the queue is empty)
        # a look that found tasks is followed by another at once: more may wait behind them
        self._look_at = now if tasks else now + max(Conf.POLL, settings.JUNE_Q_LISTEN_POLL)
        return tasks

    def acknowledge(self, task_id):
        """Delete the finished task's row, on the monitor's open connection."""
        if not self._on_postgresql():
            return super().acknowledge(task_id)
        return _kept(lambda: self._execute(ACKNOWLEDGE, [task_id]))

    def _claim_next(self) -> list[tuple[int, str]]:
        """Up to ``Conf.BULK`` unlocked rows, claimed (locked for ``Conf.RETRY``) in one
        statement on the pusher's open connection (``CLAIM_NEXT``), oldest first."""
        now = timezone.now()
        return _kept(
            lambda: self._execute(
                CLAIM_NEXT, [now + timedelta(seconds=Conf.RETRY), self.list_key, now, Conf.BULK], rows=True
            )
        )

    @staticmethod
    def _execute(statement: str, params: list, *, rows: bool = False):
        connection = db.connections[Conf.ORM]
        with connection.cursor() as cursor:
            cursor.execute(statement.format(table=connection.ops.quote_name(OrmQ._meta.db_table)), params)
            return [tuple(row) for row in cursor.fetchall()] if rows else cursor.rowcount

    def _ensure_listener(self) -> Listener | None:
        if self._listener is not None and self._listener_pid == os.getpid():
            return self._listener
        self._listener = None  # never use a connection inherited through fork
        if time.monotonic() < self._retry_at or not self._on_postgresql():
            return None
        try:
            self._listener = Listener(self.channel)
        except Exception:
            log.warning("queue listener cannot connect; polling (retry in %.0fs)", RECONNECT_SECONDS, exc_info=True)
            self._retry_at = time.monotonic() + RECONNECT_SECONDS
            return None
        self._listener_pid = os.getpid()
        return self._listener

    def close_listener(self) -> None:
        if self._listener is not None and self._listener_pid == os.getpid():
            self._listener.close()
        self._listener = None
