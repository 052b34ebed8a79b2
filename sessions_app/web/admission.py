"""Admission: a new turn waits at the door while the workers are behind.

A burst of new turns is accepted far faster than the workers beside it can start them: under
1,000 ``POST …/turns`` at once on two cores, daphne took a core to accept them at 100-190 a
second while the two workers, on what was left, handed their runners 60-120 a second; the
turns accepted last waited seconds in the queue after their 202, and the burst's last turn
settled 4.7-5.5 s after the last acceptance where its own model calls take 2 s
(``bench/bench_concurrency.py``). Admission moves that wait to before the start, where it costs
nothing: while more than ``JUNE_ADMISSION_BACKLOG`` turns wait in the queue for a worker, and
the workers are taking from it, a request that starts a turn waits, in arrival order, for at
most ``JUNE_ADMISSION_WAIT`` seconds, and then starts its turn anyway: it is never refused for
this, and nothing is lost. A waiting request holds no database connection and uses no CPU, so
the cores go to the turns already accepted.

The depth of the queue is the count of django-q2's task rows not yet acknowledged (``OrmQ``:
tasks waiting for a cluster, or taken and not yet on a runner). One thread per web process reads
it every ``PERIOD`` seconds while requests come or wait (one small query), and lets waiting
requests in, oldest first, as the depth falls below the backlog. The same query reads when the
oldest task still waiting for a cluster was queued: while the clusters take tasks it moves on
(or none waits). A queue whose oldest task stays put — no worker running, every runner full with
long turns — holds nobody for longer than ``DRAINING`` seconds: waiting helps only while the
workers are draining it.

On SQLite the door has a second part: SQLite has one writer, and a thousand request threads
each retrying for its lock starve the workers' claims of theirs (django-q2's pusher marks a task
taken with an UPDATE): under 1,000 starts at once the clusters took 1-9 tasks a second while the
starts went on, and the burst's last turn settled 8-12 s after the last acceptance. So at most
``SQLITE_WRITERS`` starts of a web process write at once (``start_turn``; whatever
``JUNE_ADMISSION_BACKLOG`` says); the others wait on a semaphore, not on SQLite's lock, and the
workers' writes get their turn.

The API's ``POST …/turns`` passes through it after its authentication and its body's validation
(a bad request is answered at once), and the chat's websocket ``start`` frame on a socket
authenticated when it opened. ``JUNE_ADMISSION_BACKLOG=0`` turns it off."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from typing import Any, Callable

from django.conf import settings
from django.db import connection, connections

log = logging.getLogger(__name__)

#: seconds between the reader's looks at the queue's depth
PERIOD = 0.05
#: a queue seen falling within this many seconds is being drained by the workers
DRAINING = 1.0
#: the reader's thread ends after this many seconds without a request
IDLE = 5.0
#: on SQLite, the starts of one web process that write at once
SQLITE_WRITERS = 2


class _Waiter:
    """One request waiting for admission: on its thread (an event) or on a loop (a future)."""

    __slots__ = ("_event", "_future", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._event = threading.Event() if loop is None else None
        self._future: asyncio.Future[None] | None = loop.create_future() if loop is not None else None

    def admit(self) -> None:
        if self._event is not None:
            self._event.set()
            return
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(_resolve, self._future)
        except RuntimeError:  # its loop is closed: the process is ending, nobody waits any more
            pass

    def wait(self, timeout: float) -> bool:
        assert self._event is not None
        return self._event.wait(timeout)

    async def await_(self, timeout: float) -> bool:
        assert self._future is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._future), timeout)
        except TimeoutError:
            return False
        return True


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class Gate:
    """A web process's door for new turns (``backlog``: turns allowed to wait in the queue;
    ``max_wait``: seconds a request waits at most; ``depth``: reads the queue's depth and a
    mark of its oldest waiting task, None when none waits)."""

    def __init__(
        self,
        *,
        backlog: int,
        max_wait: float,
        depth: Callable[[], tuple[int, Any]],
        period: float = PERIOD,
        clock: Callable[[], float] = time.monotonic,
        reader: bool = True,
    ) -> None:
        self.backlog = backlog
        self.max_wait = max_wait
        self.period = period
        self._read_depth = depth
        self._clock = clock
        self._lock = threading.Lock()
        self._waiters: deque[_Waiter] = deque()
        self._depth = 0  # the last reading
        self._admitted = 0  # let in since the last reading: their tasks may not be in it yet
        self._head: Any = None  # the last reading's oldest waiting task
        self._drained_at = float("-inf")  # the last reading that showed the clusters taking tasks
        self._seen_at = float("-inf")  # the last request
        self._reader: threading.Thread | None = None
        self._start_reader = reader  # False: the caller calls ``look`` (tests)
        self._closed = False
        #: requests that waited
        self.waited = 0

    # -- from a request ------------------------------------------------------------------------

    def enter(self) -> float:
        """Wait for admission on the request's thread; returns the seconds waited. Gives the
        thread's database connection back first if it has to wait."""
        waiter = self._queue(None)
        if waiter is None:
            return 0.0
        began = self._clock()
        if not connection.in_atomic_block:
            connection.close()  # a waiting request holds no connection (back to the pool, if any)
        self._settle(waiter, waiter.wait(self.max_wait))
        return self._waited(began)

    async def aenter(self) -> float:
        """Wait for admission on the event loop; returns the seconds waited."""
        waiter = self._queue(asyncio.get_running_loop())
        if waiter is None:
            return 0.0
        began = self._clock()
        try:
            admitted = await waiter.await_(self.max_wait)
        except BaseException:  # the request went away while it waited
            self._settle(waiter, False)
            raise
        self._settle(waiter, admitted)
        return self._waited(began)

    def _queue(self, loop: asyncio.AbstractEventLoop | None) -> _Waiter | None:
        """None when the request is let in at once; else its place in the line."""
        now = self._clock()
        with self._lock:
            self._seen_at = now
            if self._reader is None and self._start_reader:
                self._reader = threading.Thread(target=self._read, name="june-admission", daemon=True)
                self._reader.start()
            if self._closed or (not self._waiters and not self._holding(now)):
                self._admitted += 1
                return None
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
            return waiter

    def _settle(self, waiter: _Waiter, admitted: bool) -> None:
        if admitted:
            return
        with self._lock:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                return  # let in meanwhile (and counted)
            self._admitted += 1  # its wait ran out: it goes ahead all the same

    def _waited(self, began: float) -> float:
        with self._lock:
            self.waited += 1
        return self._clock() - began

    def _holding(self, now: float) -> bool:
        return self._depth + self._admitted >= self.backlog and now - self._drained_at < DRAINING

    # -- the reader's thread -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the reader and let every waiting request in (a process that ends, a test)."""
        with self._lock:
            self._closed = True
            reader = self._reader
            while self._waiters:
                self._waiters.popleft().admit()
        if reader is not None and reader is not threading.current_thread():
            reader.join(10)

    def _read(self) -> None:
        try:
            while self.look():
                time.sleep(self.period)
        except Exception:  # a bug here must not keep anyone waiting: let the line in
            log.exception("admission: the reader failed; the waiting requests go in")
            with self._lock:
                self._reader = None
                while self._waiters:
                    self._waiters.popleft().admit()
        finally:
            connections.close_all()

    def look(self) -> bool:
        """One reading of the depth; lets waiting requests in. False when the reader may end
        (no request waits, and none came for ``IDLE`` seconds)."""
        try:
            depth, head = self._read_depth()
        except Exception:  # the database is away: hold nobody (the start reports the error)
            log.warning("admission: the queue's depth could not be read", exc_info=True)
            connections.close_all()
            depth = head = None
        now = self._clock()
        with self._lock:
            if self._closed:
                self._reader = None
                return False
            if depth is None:
                self._drained_at = float("-inf")
            else:
                if head is None or head != self._head:
                    self._drained_at = now
                self._depth, self._head, self._admitted = depth, head, 0
            while self._waiters and not self._holding(now):
                self._waiters.popleft().admit()
                self._admitted += 1
            if not self._waiters and now - self._seen_at > IDLE:
                self._reader = None
                return False
            return True


def queue_depth() -> tuple[int, Any]:
    """django-q2's task rows of this site's queue not yet acknowledged, and when the oldest of
    those no cluster has taken was queued (None: none waits). A waiting task's ``lock`` is its
    enqueue time; a taken one's lies ahead (its take + ``retry``)."""
    from django.db.models import Count, Min, Q
    from django.utils import timezone
    from django_q.conf import Conf
    from django_q.models import OrmQ

    alias = Conf.ORM or "default"
    row = (
        OrmQ.objects.using(alias)
        .filter(key=Conf.CLUSTER_NAME)
        .aggregate(depth=Count("id"), head=Min("lock", filter=Q(lock__lte=timezone.now())))
    )
    db = connections[alias]
    if getattr(db, "pool", None) is not None and not db.in_atomic_block:
        db.close()  # back to the pool between readings
    return row["depth"], row["head"]


#: the gates this process made (one per setting's value: one, outside tests)
_made: list[Gate] = []


@functools.cache
def _gate(backlog: int, max_wait: float) -> Gate | None:
    if backlog <= 0:
        return None
    made = Gate(backlog=backlog, max_wait=max_wait, depth=queue_depth)
    _made.append(made)
    return made


def gate() -> Gate | None:
    """This process's gate (None when ``JUNE_ADMISSION_BACKLOG`` is 0)."""
    return _gate(int(settings.JUNE_ADMISSION_BACKLOG), float(settings.JUNE_ADMISSION_WAIT))


_sqlite_writers = threading.BoundedSemaphore(SQLITE_WRITERS)


def start_turn(**start: Any) -> Any:
    """``services.turn_start(**start)``, at most ``SQLITE_WRITERS`` at once in this process on
    SQLite (the module's docstring says why); as it is elsewhere."""
    from sessions_app import services

    if connection.vendor != "sqlite":
        return services.turn_start(**start)
    with _sqlite_writers:
        return services.turn_start(**start)


def close() -> None:
    """Close this process's gates (one is made again on the next request)."""
    _gate.cache_clear()
    while _made:
        _made.pop().close()


def enter() -> float:
    """Wait for admission (a request's thread); seconds waited."""
    door = gate()
    return door.enter() if door is not None else 0.0


async def aenter() -> float:
    """Wait for admission (an async view or consumer); seconds waited."""
    door = gate()
    return await door.aenter() if door is not None else 0.0


__all__ = ["Gate", "aenter", "close", "enter", "gate", "queue_depth", "start_turn"]
