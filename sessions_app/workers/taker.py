"""Queued turns delivered by their own rows: a worker process's runner takes them from the turn
table whenever it has room.

A turn is queued by its row (status ``queued``); nothing else carries it to a worker. Each worker
process's runner keeps a thread, the taker, that:

- waits to be woken: on PostgreSQL by a ``NOTIFY`` on ``queue.TURNS_CHANNEL``, which the
  transaction that queues a turn sends (``queue.enqueue_turn``: PostgreSQL delivers it at that
  commit), on a ``LISTEN`` connection of its own; on SQLite by ``PRAGMA data_version``, looked at
  every ``JUNE_Q_POLL`` seconds, which moves only when another connection committed (an idle look
  is one statement answered from memory). Either way it also looks every ``JUNE_Q_LISTEN_POLL``
  seconds, the fallback for a lost notification and the time a take's mark runs out, while
  anything happens; once a look that nothing woke found nothing and its runner had room, it
  waits (``quiet_wait``) until the earliest live take mark runs out, at most ``JUNE_REQUEUE_AFTER``
  (or ``lease.RETRY_HOLD``, if shorter): a mark made later runs out no sooner, and a notification
  is lost only with its connection, after which the taker looks at once;
- takes as many turns as its runner has room for (free slots; beyond a few turns, one at a time
  and only while its loop can start it now: ``runner.reserve``), at most ``TAKE_BATCH`` a
  statement, oldest first, in one conditional ``UPDATE`` (``TAKE``): turns queued (or running on
  an expired lease the sweeper marked for re-delivery) and first of their session's chain, not
  taken by a live take. On PostgreSQL the rows are read ``FOR UPDATE SKIP LOCKED``, so two
  runners taking at once never fight over a row; on SQLite the statement holds the one write
  lock. The take marks each turn (``lease.TAKEN`` + the runner's ``host:pid`` in
  ``lease_owner``, and until when in ``lease_expires_at``: ``JUNE_REQUEUE_AFTER``), so no other
  runner takes it meanwhile;
- hands each taken turn to its runner's loop, which claims its lease as any delivery's claim does
  (``lease.CLAIM``, the fence: one claim wins, whatever took the turn).

The take is no lease: the claim is still the truth of who drives a turn. A runner killed between
its take and its claim leaves the mark, which runs out after ``JUNE_REQUEUE_AFTER`` seconds;
then any runner takes the turn again (a stopped cluster's marks are expired at its stop:
``shutdown.release_leases``). A turn queued while no worker runs waits in its row until one
starts: a taker's first look is at its start.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from django.conf import settings
from django.db import connections

from agents_app.runtime.executor import default_owner
from sessions_app.outbox.queue import TURNS_CHANNEL
from sessions_app.store.checkpoint import IN_CHAIN
from sessions_app.store.lease import RETRY_HOLD, TAKEN


class Room(Protocol):
    """What a taker asks of its runner (``runner.TurnRunner``)."""

    limit: int

    def accepting(self) -> bool: ...
    def reserve(self, most: int) -> int: ...
    def unreserve(self, count: int) -> None: ...
    def hand(self, turn_id: str) -> None: ...
    def wait_for_room(self, timeout: float) -> None: ...


log = logging.getLogger(__name__)

#: the most turns one take claims for its runner (a runner with more room takes again at once)
TAKE_BATCH = 8
#: seconds between attempts after a failed take or a listener that cannot connect
RECONNECT_SECONDS = 1.0
#: the ``application_name`` of a runner's ``LISTEN`` connection
LISTENER = "june-turns-listener"

#: what a runner may take: queued, or running on an expired lease that the sweeper marked for
#: re-delivery (``sweeper.SWEPT``); first of its session's chain (``lease.CLAIM``'s condition); not
#: taken by a take whose mark is still live. Parameters: now, now.
TAKEABLE = f"""
(t.status = 'queued' OR (t.status = 'running' AND t.lease_owner LIKE 'swept:%%' AND t.lease_expires_at < %s))
AND NOT (COALESCE(t.lease_owner, '') LIKE '{TAKEN}%%' AND t.lease_expires_at >= %s)
AND t.id = (
  SELECT h.id FROM sessions_app_turn AS h
  WHERE h.session_id = t.session_id AND h.status {IN_CHAIN}
  ORDER BY h."order" LIMIT 1
)"""
#: the take: mark up to ``limit`` takeable turns, oldest first, and answer their ids. Parameters:
#: the mark, its expiry, now, now, limit.
TAKE = (
    "UPDATE sessions_app_turn SET lease_owner = %s, lease_expires_at = %s WHERE id IN ("
    f"SELECT t.id FROM sessions_app_turn AS t WHERE {TAKEABLE} ORDER BY t.created_at LIMIT %s{{lock}}"
    ") RETURNING id, created_at"
)
TAKE_PG = TAKE.format(lock=" FOR UPDATE OF t SKIP LOCKED")
TAKE_LITE = TAKE.format(lock="")
#: SQLite: whether a take would find anything, read before taking the write lock
ANY_LITE = f"SELECT 1 FROM sessions_app_turn AS t WHERE {TAKEABLE} LIMIT 1"


#: the earliest expiry of a live take mark on a queued turn (the moment it becomes takeable). Parameter: now.
MARKS = (
    "SELECT MIN(lease_expires_at) FROM sessions_app_turn"
    f" WHERE status = 'queued' AND lease_owner LIKE '{TAKEN}%%' AND lease_expires_at >= %s"
)


def quiet_wait(fallback: float, *, now: float | None = None) -> float:
    """How long a taker whose look found the queue empty, unwoken and with room, may wait for its
    next: until the earliest live take mark runs out, at most ``JUNE_REQUEUE_AFTER`` (a mark made
    later, by a take or a retry's release, runs out no sooner), never less than ``fallback``."""
    now = time.time() if now is None else now
    with connections["default"].cursor() as cursor:
        cursor.execute(MARKS, [now])
        (earliest,) = cursor.fetchone()
    longest = min(float(settings.JUNE_REQUEUE_AFTER), RETRY_HOLD)
    return max(fallback, min(longest, longest if earliest is None else earliest - now))


def take(owner: str, limit: int, *, now: float | None = None, window: float | None = None) -> list[str]:
    """Take up to ``limit`` queued turns for the runner ``owner`` (``host:pid``), on this thread's
    Django connection: their ids, oldest first (see the module)."""
    now = time.time() if now is None else now
    window = settings.JUNE_REQUEUE_AFTER if window is None else window
    connection = connections["default"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(TAKE_PG, [(TAKEN + owner)[:200], now + window, now, now, limit])
        else:
            cursor.execute(ANY_LITE, [now, now])
            if cursor.fetchone() is None:
                return []
            cursor.execute(TAKE_LITE, [(TAKEN + owner)[:200], now + window, now, now, limit])
        return [turn_id for turn_id, _ in sorted(cursor.fetchall(), key=lambda row: row[1])]  # (RETURNING: any order)


class NotifyWaiter:
    """PostgreSQL: a ``LISTEN`` connection on ``TURNS_CHANNEL``."""

    def __init__(self) -> None:
        from sessions_app.workers.broker import Listener

        self.listener = Listener(TURNS_CHANNEL, application_name=LISTENER)

    def wait(self, timeout: float) -> bool:
        return self.listener.wait(timeout)

    def close(self) -> None:
        self.listener.close()


class VersionWaiter:
    """SQLite: ``PRAGMA data_version`` on this thread's Django connection, looked at every
    ``JUNE_Q_POLL`` seconds; it moves only when another connection commits."""

    def __init__(self) -> None:
        self.version = self._read()

    @staticmethod
    def _read() -> int:
        connection = connections["default"]
        connection.ensure_connection()  # (the sqlite3 connection itself: no cursor wrapper per look)
        return connection.connection.execute("PRAGMA data_version").fetchone()[0]

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        poll = max(float(settings.Q_CLUSTER.get("poll", 0.05)), 0.005)
        while time.monotonic() < deadline:
            time.sleep(min(poll, max(deadline - time.monotonic(), 0.0)))
            version = self._read()
            if version != self.version:
                self.version = version
                return True
        return False

    def close(self) -> None:
        pass


class Taker:
    """The thread that takes queued turns for one runner (see the module)."""

    def __init__(self, runner: Room) -> None:
        self.runner = runner
        self.owner = default_owner()
        self.taken = 0
        self._thread = threading.Thread(target=self._run, name="june-taker", daemon=True)
        self._tuned: object = None

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        waiter: NotifyWaiter | VersionWaiter | None = None
        fallback = max(float(settings.JUNE_Q_LISTEN_POLL), float(settings.Q_CLUSTER.get("poll", 0.05)))
        woken = True  # the first look (at the start, after a reconnection): as if woken
        try:
            while self.runner.accepting():
                try:
                    if waiter is None:
                        waiter = NotifyWaiter() if connections["default"].vendor == "postgresql" else VersionWaiter()
                        woken = True
                    taken = self.taken
                    if not self._take_all():
                        self.runner.wait_for_room(fallback)  # full: look again once a turn ends
                        woken = True
                        continue
                    quiet = not woken and self.taken == taken
                    woken = waiter.wait(quiet_wait(fallback) if quiet else fallback)
                except Exception:
                    log.warning("taking queued turns failed; trying again in %.0f s", RECONNECT_SECONDS, exc_info=True)
                    if waiter is not None:
                        waiter.close()
                        waiter = None
                    connections.close_all()
                    time.sleep(RECONNECT_SECONDS)
        finally:
            if waiter is not None:
                waiter.close()
            connections.close_all()

    def _tune(self) -> None:
        """PostgreSQL: the takes on this thread's connection commit without waiting for the WAL
        flush. A take lost with a crash of the server leaves the turn queued and unmarked: any
        runner takes it again, and the claim, not the take, decides who drives it."""
        connection = connections["default"]
        if connection.vendor != "postgresql":
            return
        connection.ensure_connection()
        if connection.connection is not self._tuned:
            with connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit TO off")
            self._tuned = connection.connection

    def _take_all(self) -> bool:
        """Take until the table has no more for this runner or the runner no more room, at most
        ``TAKE_BATCH`` a statement. False: the runner had no room (nothing was looked at)."""
        self._tune()
        while True:
            room = self.runner.reserve(self.runner.limit)
            if room == 0:
                return False
            handed = 0
            try:
                while handed < room:
                    most = min(TAKE_BATCH, room - handed)
                    ids = take(self.owner, most)
                    for turn_id in ids:
                        self.runner.hand(turn_id)
                    handed += len(ids)
                    self.taken += len(ids)
                    if len(ids) < most:
                        return True
            finally:
                self.runner.unreserve(room - handed)
