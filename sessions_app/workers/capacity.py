"""How many queued turns a runner may take now: its taker asks (``runner.TurnRunner.reserve``).

A turn's ``turn.started`` is committed by its claim. A turn taken while the runner's loop is busy
with the others would say it started and then wait behind them, so the runner takes no more than
its loop can start now:

- a runner driving fewer than ``BUSY_FLOOR`` turns takes up to that many at once;
- beyond, it first lets the turns it handed before claim (their work is then on the loop), then
  reads how much of a CPU its loop's thread wants over ``DEMAND_LOOK`` seconds (``demand``: what
  its turns cost, read at that moment, not smoothed, since a burst's takes come milliseconds
  apart) and takes as many more as fit under ``BUSY_SHARE`` of a CPU at that cost per turn, at
  most as many again as it drives (a turn's first moments, its claim and first commit, want less
  than the rest of it), and none while a callback put on the loop now waits longer than
  ``JUNE_RUNNER_BUSY_LAG`` (``delay``).

Turns waiting for their model want almost nothing, so a burst of them is taken within a few
looks; turns that compute are taken as the loop frees. A loop that stays busy for ``BUSY_WAIT``
takes none (its taker looks again when a turn ends); the table keeps the rest for any runner.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from django.conf import settings

#: a runner driving fewer turns than this takes new ones however busy its loop is
BUSY_FLOOR = 8
#: the share of a CPU a runner's loop thread may want before it takes no more turns, and how long
#: a look at it lasts (seconds)
BUSY_SHARE = 0.8
DEMAND_LOOK = 0.1
#: the longest one ask waits for room (seconds)
BUSY_WAIT = 2.0


class LoopCapacity:
    """One runner's room for more turns (see the module). ``attach`` on the loop's thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.loop: asyncio.AbstractEventLoop | None = None
        #: turns handed to the loop whose claim has not answered yet
        self.unclaimed = 0
        self._claims = threading.Condition()
        self._clock: Callable[[], float] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._clock = thread_demand()

    def count(self, change: int) -> None:
        """A turn handed (+1), or its claim answered (-1)."""
        with self._claims:
            self.unclaimed += change
            if self.unclaimed == 0:
                self._claims.notify_all()

    def free(self, running: Callable[[], int]) -> int:
        """Wait for room (``BUSY_WAIT`` at most) and say how many turns may be taken: 0 for
        none now. ``running``: how many turns the runner drives."""
        limit = float(getattr(settings, "JUNE_RUNNER_BUSY_LAG", 0.0))
        if limit <= 0:
            return self.limit
        deadline = time.monotonic() + BUSY_WAIT
        while True:
            held = running() + self.unclaimed
            if held < BUSY_FLOOR:
                return BUSY_FLOOR - held
            left = deadline - time.monotonic()
            if left <= 0:
                return 0
            with self._claims:
                if not self._claims.wait_for(lambda: self.unclaimed == 0, left):
                    continue
            wanted = self.demand(DEMAND_LOOK)
            held = max(running(), 1)
            room = held if wanted <= 0 else min(held, int(held * (BUSY_SHARE - wanted) / wanted))
            if room > 0 and self.delay(max(deadline - time.monotonic(), 0.0)) <= limit:
                return room

    def demand(self, look: float) -> float:
        """The share of a CPU the loop's thread ran or waited to run over the next ``look``
        seconds (0 where its clock cannot be read)."""
        clock = self._clock
        if clock is None:
            time.sleep(look)
            return 0.0
        began, used = time.monotonic(), clock()
        time.sleep(look)
        return (clock() - used) / max(time.monotonic() - began, 1e-6)

    def delay(self, timeout: float) -> float:
        """How long a callback put on the loop now waits before it runs (seconds; ``timeout``
        if it has not run by then): how late the loop runs at this moment."""
        assert self.loop is not None
        ran: list[float] = []
        done = threading.Event()

        def mark() -> None:
            ran.append(time.monotonic())
            done.set()

        began = time.monotonic()
        try:
            self.loop.call_soon_threadsafe(mark)
        except RuntimeError:  # the loop has closed
            return timeout
        return ran[0] - began if done.wait(timeout) else timeout


def thread_demand() -> Callable[[], float] | None:
    """A clock of this thread's time running or runnable (seconds), readable from another
    thread: on Linux its schedstat (CPU time and the wait for a CPU: a loop starved by the
    machine's other work wants it too), else its CPU time; None where neither can be read."""
    path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    try:
        with open(path) as stat:
            stat.read()
    except OSError:
        pass
    else:

        def schedstat() -> float:
            with open(path) as stat:
                ran, waited = stat.read().split()[:2]
            return (int(ran) + int(waited)) / 1e9

        return schedstat
    try:
        clock = time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):
        return None
    return lambda: time.clock_gettime(clock)
