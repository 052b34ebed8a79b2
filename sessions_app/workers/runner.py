"""Many turns per worker process: the process's runner.

A turn spends almost all of its time waiting for the model. So a django-q2 worker process does
not run its turns one at a time: its ``run_turn`` task hands the turn to the process's
``TurnRunner`` — an event loop on a thread of its own that drives up to ``JUNE_TURNS_PER_WORKER``
turns at once — and returns once the runner has put the turn on that loop, which claims
its lease a moment later (or finds it not claimable: held elsewhere, or not first in its
session's chain). django-q2 then acknowledges the task and hands the worker its next one. The
lease is the truth of who drives the turn, as it always was: a worker that dies takes its turns'
leases with it, they expire, and the sweeper (every worker's watchdog) re-enqueues them
elsewhere; a turn it took but had not claimed yet is a queued turn with no task, which the
watchdog re-enqueues too (``sweep_queued``).

Backpressure: a runner at its limit takes no more. ``submit`` waits for a free slot before it
hands the turn over, so the q2 worker blocks in its task and its cluster fetches no more tasks
than its queue holds (``JUNE_Q_QUEUE_LIMIT``); the rest wait in the queue, for any cluster.

Nothing blocks the loop (docs/workers.md, "Many turns per worker"):
- a unit that runs no tool code goes to the database without waiting on it: on PostgreSQL
  through ``JUNE_WORKER_DB_CONNECTIONS`` connections in pipeline mode (``store.pipes``), on
  SQLite through the loop thread's own connection, whose statements take microseconds and never
  wait for a lock (``store.lite``: another writer's lock sends the unit to a thread);
- everything that uses Django's connection — a sync (``def``) tool's unit (its ORM writes share
  the checkpoint's transaction), a spawn, the reads and host calls of the thread path — runs on
  a pool of ``JUNE_WORKER_THREADS`` threads, each with a Django connection of its own; a tool
  that sleeps holds its thread, not the loop.

So a worker process holds at most ``JUNE_WORKER_DB_CONNECTIONS + JUNE_WORKER_THREADS`` database
connections for its turns, plus the few of its own (q2's, the watchdog's, the doorbell's, its
worker beat's: ``sessions_app.workers.beat``, written every ``JUNE_WORKER_BEAT_SECONDS``).

The runner's thread is not a daemon: when django-q2 retires the worker (``recycle``) its main
thread returns, and the process waits for the runner's turns to end before it exits; the runner
takes no new turn by then (nothing submits), and stops once it has none. A SIGTERM or SIGKILL
ends the process with its turns, as any crash does: their leases are released by the cluster
(``june_worker``) or expire.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connections

from agents_app.providers import long_lived_loop
from agents_app.runtime.executor import TurnExecutor
from agents_app.runtime.seams import TurnStatus
from sessions_app import wiring
from sessions_app.outbox.doorbell import cancel_listener
from sessions_app.store import DjangoSessionStore, Threads
from sessions_app.store.pipes import Pipes
from sessions_app.workers import capacity
from sessions_app.workers.beat import Heart
from sessions_app.workers.taker import Taker

log = logging.getLogger(__name__)

#: seconds between the idle runner's looks at whether its process is ending
IDLE_CHECK = 0.5
#: seconds a task waits for a free slot before it leaves its turn queued
SLOT_WAIT = 300.0
#: the loop watch's period, and the lateness it logs (seconds)
LAG_TICK = 0.1
LAG_WARNING = 0.5
#: the weight of each tick's lateness in the smoothed ``TurnRunner.lag``
LAG_WEIGHT = 0.3
#: the longest a hand-over waits for a late loop to catch up (then it goes ahead), and how often
#: it looks (seconds); a runner driving fewer than ``capacity.BUSY_FLOOR`` turns never waits
BUSY_WAIT = 2.0
BUSY_LOOK = 0.01


class TurnRunner:
    """Drives this process's turns on one event loop in a thread of its own."""

    def __init__(self, *, limit: int, threads: int, connections_: int, take: bool = False) -> None:
        if limit < 1 or threads < 1:
            raise ValueError("a runner needs at least one slot and one thread")
        self.limit = limit
        self.pid = os.getpid()
        self._slots = threading.BoundedSemaphore(limit)
        self._threads = Threads(threads)
        self._pipes = Pipes(connections_) if _postgresql() else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="june-runner", daemon=False)
        self.executor: TurnExecutor | None = None
        #: the drives this runner runs now (a turn's id, by its task: a duplicate delivery of a
        #: turn is a drive of its own, whose claim is refused)
        self.running: dict[asyncio.Task[Any], str] = {}
        #: the most turns it drove at once, and the latest its loop ran a timer (seconds)
        self.peak = 0
        self.lag_max = 0.0
        #: the loop's recent lateness (seconds, smoothed over about ``LAG_TICK / LAG_WEIGHT``)
        self.lag = 0.0
        #: on the loop: set when a turn starts (the watch of the loop sleeps while none runs)
        self._busy: asyncio.Event | None = None
        #: set when a turn ends (a slot freed): a full runner's taker looks again
        self._room = threading.Event()
        #: how many turns its taker may take now (``workers.capacity``)
        self.capacity = capacity.LoopCapacity(limit)
        #: ``take``: this runner takes queued turns from the turn table (``workers.taker``)
        self.taker: Taker | None = Taker(self) if take else None

    # -- from django-q2's worker thread -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._started.wait()
        if self.taker is not None:
            self.taker.start()

    def accepting(self) -> bool:
        """Whether this runner takes new turns: not stopping, and its process's main thread
        alive (a worker that django-q2 retires takes none)."""
        return not self._stopping and threading.main_thread().is_alive() and self._thread.is_alive()

    # -- from the taker's thread (``workers.taker``) ---------------------------------------------

    def reserve(self, most: int) -> int:
        """Hold up to ``most`` free slots for turns about to be taken, as many as the loop can
        start now (``capacity``); how many. None while the runner takes no new turn."""
        if not self.accepting():
            return 0
        most = min(most, self.capacity.free(lambda: len(self.running)))
        self._room.clear()
        held = 0
        while held < most and self._slots.acquire(blocking=False):
            held += 1
        return held

    def unreserve(self, count: int) -> None:
        for _ in range(count):
            self._slots.release()

    def hand(self, turn_id: str) -> None:
        """Put a taken turn on the loop, its slot held (``reserve``); its claim is the loop's."""
        assert self._loop is not None
        self.capacity.count(1)
        try:
            self._loop.call_soon_threadsafe(self._start, turn_id, True)
        except RuntimeError:  # the loop has closed: the take's mark runs out, another runner takes it
            self.capacity.count(-1)
            self._slots.release()

    def wait_for_room(self, timeout: float) -> None:
        self._room.wait(timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Take no more turns and return once the running ones have ended (a process that ends
        needs none of this: its main thread's end is the runner's stop)."""
        self._stopping = True
        self._thread.join(timeout)

    def submit(self, turn_id: str, *, until_claimed: bool = False) -> str | None:
        """Hand a turn over. Waits for a free slot, for at most ``SLOT_WAIT`` seconds: then
        "busy", and the turn stays queued (its task is done, so the watchdog gives it a new one:
        ``sweep_queued``). Then puts the turn on the loop and returns "handed" at once: the
        claim is the loop's (milliseconds later), and a turn that proves not claimable (held
        elsewhere, not first of its chain) only frees its slot. So django-q2's worker waits for
        no database round trip per turn and hands its runner turns as fast as its queue brings
        them (docs/workers.md). ``until_claimed`` waits for the claim's decision instead:
        "running" when this runner holds the turn's lease, None when it was not claimable."""
        if not self._slots.acquire(timeout=SLOT_WAIT):
            log.warning(
                "turn %s: no free slot in %s s (%d turns running); left queued for another worker",
                turn_id,
                SLOT_WAIT,
                len(self.running),
            )
            return "busy"
        assert self._loop is not None
        self._until_caught_up()
        try:
            claimed = asyncio.run_coroutine_threadsafe(self._admit(turn_id), self._loop)
        except BaseException:
            self._slots.release()
            raise
        return claimed.result() if until_claimed else "handed"

    def _until_caught_up(self) -> None:
        """While the loop runs late by more than ``JUNE_RUNNER_BUSY_LAG`` (smoothed), the turns
        it drives already want more CPU than it gets: a new one would only slow them all. Wait
        (``BUSY_WAIT`` at most), holding the slot; the queue keeps the rest, for a cluster with
        room."""
        if not self._late():
            return
        deadline = time.monotonic() + BUSY_WAIT
        while self._late() and time.monotonic() < deadline:
            time.sleep(BUSY_LOOK)

    # -- on the runner's loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        loop = self._loop = new_event_loop()
        self.capacity.attach(loop)
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._threads.shutdown(wait=False, cancel_futures=True)

    async def _serve(self) -> None:
        async with long_lived_loop():  # the providers' clients on this loop: closed when it ends
            await self._serve_turns()

    async def _serve_turns(self) -> None:
        store = DjangoSessionStore(pipes=self._pipes, threads=self._threads)
        executor = self.executor = wiring.executor(store=store)
        executor.on_signals = cancel_listener
        executor.on_runnable = self._runnable
        self._started.set()
        loop = asyncio.get_running_loop()
        # the store's connections, opened now rather than by the first turns (not waited for:
        # a database that is down fails no start, and the first unit opens them again)
        opening = loop.create_task(self._pipes.open_all()) if self._pipes is not None else None
        watch = loop.create_task(self._watch_the_loop())
        heart = Heart(slots=self.limit)
        beats = loop.create_task(self._beat(heart))
        try:
            while (not self._stopping and threading.main_thread().is_alive()) or self.running:
                await asyncio.sleep(IDLE_CHECK)
        finally:
            watch.cancel()
            beats.cancel()
            if opening is not None:
                opening.cancel()
            await executor.sink.close()
            await asyncio.to_thread(self._threads.close_connections)
            if self._pipes is not None:
                self._pipes.close()
            await asyncio.to_thread(heart.stop)

    async def _watch_the_loop(self) -> None:
        """How late the loop runs a timer: what one turn's computing without awaiting (or a
        blocking call) cost every other turn of the process. Kept (``lag_max``) and logged
        past ``LAG_WARNING`` seconds."""
        loop = asyncio.get_running_loop()
        busy = self._busy = asyncio.Event()
        while True:
            if not self.running:
                # no turn to be late for: no tick until one starts (an idle worker's every
                # wake-up is its CPU for nothing), and an idle loop is late for none
                self.lag = 0.0
                busy.clear()
                await busy.wait()
            due = loop.time() + LAG_TICK
            await asyncio.sleep(LAG_TICK)
            lag = loop.time() - due
            self.lag_max = max(self.lag_max, lag)
            self.lag += LAG_WEIGHT * (lag - self.lag)
            if lag > LAG_WARNING:
                log.warning(
                    "the runner's event loop was held for %.2f s (a step or an async tool computed "
                    "or blocked without awaiting); its %d turns waited",
                    lag,
                    len(self.running),
                )

    async def _beat(self, heart: Heart) -> None:
        """The process's worker beat (``sessions_app.workers.beat``): scheduled by this loop, so a
        held loop stops it; written by the heart's own thread, so the loop never waits for it."""
        while True:
            heart.beat(len(self.running))
            await asyncio.sleep(settings.JUNE_WORKER_BEAT_SECONDS)

    async def _admit(self, turn_id: str) -> str | None:
        return "running" if await self._start(turn_id) else None  # (a drive that ends decides it too)

    def _start(self, turn_id: str, taken: bool = False) -> asyncio.Future[bool]:
        """Drive a turn whose slot is held; the future says whether its claim took the lease.
        ``taken``: its taker handed it (``hand``), and counts it until its claim answers."""
        loop = asyncio.get_running_loop() if self._loop is None else self._loop
        claimed: asyncio.Future[bool] = loop.create_future()

        def decided(holds: bool) -> None:
            if not claimed.done():
                claimed.set_result(holds)
                if taken:
                    self.capacity.count(-1)

        task = loop.create_task(self._drive(turn_id, decided))
        self.running[task] = turn_id
        if self._busy is not None:
            self._busy.set()
        self.peak = max(self.peak, len(self.running))
        return claimed

    async def _runnable(self, runnable: list[tuple[str, Any]]) -> None:
        """The chain's hand-over (and spawned children, a woken parent): a turn this runner has
        room for is driven here at once, its row never waiting for a take; the rest wake the
        other runners (``wiring.enqueue_runnable``). A runner whose loop runs late keeps none."""
        rest = []
        for turn_id, ref in runnable:
            if self.accepting() and not self._late() and self._slots.acquire(blocking=False):
                self._start(turn_id)
            else:
                rest.append((turn_id, ref))
        if rest:
            await wiring.enqueue_runnable(rest)

    def _late(self) -> bool:
        limit = float(getattr(settings, "JUNE_RUNNER_BUSY_LAG", 0.0))
        return limit > 0 and self.lag > limit and len(self.running) >= capacity.BUSY_FLOOR

    async def _drive(self, turn_id: str, decided: Any) -> None:
        assert self.executor is not None
        started = time.monotonic()
        try:
            status = await self.executor.drive(turn_id, on_claim=decided)
            if status == TurnStatus.RUNNING:
                # the loop returns RUNNING only when its attempt lost the lease (fenced out)
                log.warning(
                    "turn %s: attempt of %s lost its lease; its last unit was refused", turn_id, self.executor.owner
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "turn %s failed in the runner after %.1f s (its lease runs out; the sweeper hands it on)",
                turn_id,
                time.monotonic() - started,
            )
        finally:
            decided(False)
            self.running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._slots.release()
            self._room.set()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The runner's loop: uvloop's unless ``JUNE_EVENT_LOOP`` is ``asyncio`` or uvloop is not
    installed. A model call's streaming is mostly the loop's work (sockets, callbacks): on
    uvloop a worker spends less CPU per call (docs/workers.md "The event loop" has the figures)."""
    if getattr(settings, "JUNE_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _postgresql() -> bool:
    return connections["default"].vendor == "postgresql"


_runner: TurnRunner | None = None
_runner_lock = threading.Lock()


def runner(*, take: bool = False) -> TurnRunner:
    """This process's runner, started on first use (and again should its thread have ended:
    a stopped runner, or one whose loop failed). ``take``: a worker process's, which takes
    queued turns from the turn table (``workers.taker``)."""
    global _runner
    with _runner_lock:
        if _runner is None or _runner.pid != os.getpid() or not _runner._thread.is_alive():
            started = TurnRunner(
                limit=settings.JUNE_TURNS_PER_WORKER,
                threads=settings.JUNE_WORKER_THREADS,
                connections_=settings.JUNE_WORKER_DB_CONNECTIONS,
                take=take or (_runner is not None and _runner.taker is not None and _runner.pid == os.getpid()),
            )
            started.start()
            _runner = started
        return _runner
