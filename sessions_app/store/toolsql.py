"""What a sync tool's unit sends through Django's connection (``DjangoSessionStore.atomic``).

A sync tool runs in ``transaction.atomic()`` on the thread that owns Django's connection, so
its ORM writes commit with its step's checkpoint or not at all. Most sync tools send no SQL (a
computation, an HTTP call). ``Watch`` is an execute wrapper on that connection for the tool's
run; it tells the store afterwards whether the tool used the connection (a statement, a raw
write, a ``transaction.on_commit`` hook). When it did not, there is nothing of the tool's to
commit with the checkpoint, and the store commits the step like any other unit, on the event
loop's thread and the store's own connection.

On SQLite the unit also takes the database's write lock only when the tool first uses the
connection, not for the whole of the tool's run: the unit's transaction begins ``DEFERRED``
(Django's ``BEGIN IMMEDIATE``, rewritten as it passes), and before the tool's first statement a
write that changes nothing (``TAKE_LOCK``) takes the lock, waiting for it under the busy
timeout. From that statement to the commit the unit holds the lock, as an immediate transaction
does: the tool's reads and writes are serialized with every other writer and cannot fail on a
stale snapshot (``SQLITE_BUSY_SNAPSHOT``, which a read followed by a write in a deferred
transaction meets when another connection committed in between). A tool that sends no SQL holds
no lock while it runs, so other workers' checkpoints, the site's requests and this turn's own
heartbeats go on meanwhile.

A statement of the tool that fails because of the database itself — ``OperationalError`` or
``InterfaceError``: locked past the busy timeout, the connection broken by a restart or a killed
peer — is the unit's error too (``failed``), whatever the tool made of it: the unit rolls back
and the attempt ends, and the redelivery runs the tool again. Handed to the model as the tool's
error result, it completed the turn without the tool's write — a sync tool, exactly-once,
that had run zero times (the SQLite chaos run's completed turn with no ``Order`` row;
``tests/contract/test_django_replay.py`` pins it). An error of the tool's own making (an
``IntegrityError``, a ``ValueError``) stays the tool's result.
"""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError
from psycopg.pq import TransactionStatus

#: a write that changes nothing: it begins the deferred transaction's write (the lock) and waits
#: for another writer's lock under the busy timeout, as ``BEGIN IMMEDIATE`` does
TAKE_LOCK = "UPDATE sessions_app_turn SET revision = revision WHERE 0"


class Watch:
    """An execute wrapper (``connection.execute_wrapper``) around a sync tool's unit, installed
    before its ``transaction.atomic()`` opens the outermost transaction."""

    __slots__ = ("connection", "sqlite", "opening", "used", "changes", "refused", "failed")

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.sqlite = connection.vendor == "sqlite"
        #: the next statement is the unit's own BEGIN (SQLite: to begin deferred)
        self.opening = self.sqlite
        self.used = False
        #: the raw connection's count of changed rows when the unit began (SQLite; None until then)
        self.changes: int | None = None
        #: the lock not taken (the busy timeout ran out): the unit's error, whatever the tool made of it
        self.refused: BaseException | None = None
        #: a statement of the tool failed because of the database (not the tool): the unit's error
        self.failed: BaseException | None = None

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if self.opening:
            self.opening = False
            if sql.startswith("BEGIN"):  # ``transaction.atomic()`` opening the unit
                result = execute("BEGIN DEFERRED", params, many, context)
                self.changes = self.connection.connection.total_changes
                return result
        if not self.used:
            self.used = True
            if self.changes is not None:  # before the tool's first statement: the lock
                try:
                    execute(TAKE_LOCK, None, False, context)
                except BaseException as exc:
                    self.refused = exc
                    raise
        try:
            return execute(sql, params, many, context)
        except (OperationalError, InterfaceError) as exc:
            if self.failed is None:
                self.failed = exc
            raise

    @property
    def unit_error(self) -> BaseException | None:
        """The error that is the unit's, not the tool's (the lock not taken, the database failed)."""
        return self.refused if self.refused is not None else self.failed

    def untouched(self) -> bool:
        """Inside the unit's atomic block, after the tool ran: the tool sent nothing through the
        connection (no statement, no raw write, no ``on_commit`` hook), so nothing of its needs
        the checkpoint's transaction."""
        connection = self.connection
        if self.used or connection.run_on_commit:
            return False
        raw = connection.connection
        if self.sqlite:
            # begun as Django's own statement here (else the unit is not watched as it began)
            return self.changes is not None and raw.total_changes == self.changes
        # PostgreSQL: psycopg begins the transaction at the first statement, raw ones included
        return raw is not None and raw.info.transaction_status == TransactionStatus.IDLE
