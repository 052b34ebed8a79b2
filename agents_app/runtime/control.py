"""Control flow of one attempt: live signals (cancel), the park, a retryable failure, and the
race of an async tool against the cancel."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine

#: how long an async tool the cancel interrupted may take to unwind (its ``finally`` blocks, a
#: client's close) before the loop abandons it and ends the turn anyway; a tool that swallows
#: ``CancelledError`` costs its turn this long at most, not the tool's whole run
CANCEL_GRACE = 1.0


class Park(BaseException):
    """Raised inside an async tool by ``request_input`` when no answer is stored (a
    BaseException, so a tool's own ``except Exception`` cannot swallow the park)."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(request["id"])
        self.request = request


class RetryableTurnError(Exception):
    """The attempt failed in a way a redelivery may fix (nothing was committed)."""


@dataclass(slots=True)
class Signals:
    """Live signals for a running attempt; ``cancel_reason`` is also refreshed from every
    commit and heartbeat, so a durable cancel request is honoured without a live signal.
    ``cancel`` is called on the attempt's event loop (a thread hands it over with
    ``call_soon_threadsafe``)."""

    cancel_reason: str | None = None
    woke: asyncio.Event = field(default_factory=asyncio.Event)
    #: called at every cancel: what waits for one besides the checkpoint boundaries (an async
    #: tool in flight, ``interruptible``)
    wakers: list[Callable[[], None]] = field(default_factory=list)

    def cancel(self, reason: str) -> None:
        if not self.cancel_reason:
            self.cancel_reason = reason
        self.woke.set()
        for wake in list(self.wakers):
            wake()


class ToolInterrupted(Exception):
    """The cancel won the race against an async tool (``interruptible``): the tool's task was
    cancelled and unwound, or — ``abandoned`` — ignored the cancel past ``CANCEL_GRACE``."""

    def __init__(self, *, abandoned: bool = False) -> None:
        super().__init__("interrupted by a cancel" + (" (abandoned: it ignored the cancel)" if abandoned else ""))
        self.abandoned = abandoned


#: tasks abandoned by ``interruptible``, held until they end (the event loop keeps only weak
#: references to its tasks)
_ABANDONED: set[asyncio.Task[Any]] = set()


def _forget(task: asyncio.Task[Any]) -> None:
    _ABANDONED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: whatever it ended with is of no use to anyone now


async def interruptible(work: Coroutine[Any, Any, Any], signals: Signals) -> Any:
    """Run ``work`` (an async tool's run) as a task, raced against the attempt's cancel.

    ``work`` ending first wins: its value is returned, or what it raised is raised (a park
    included), even when the cancel came in the same moment. The cancel coming first (or having
    come already) cancels the task and waits up to ``CANCEL_GRACE`` for it: a task that ended
    cancelled or raising raises ``ToolInterrupted``; one that caught the cancel and returned a
    value returns it (it ran to its end); one still running is abandoned and raises
    ``ToolInterrupted(abandoned=True)``. A cancel of the caller itself (a worker stopping)
    cancels the task with it."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(work)
    woken = loop.create_future()

    def wake(_: object = None) -> None:
        if not woken.done():
            woken.set_result(None)

    # a done callback and a waker instead of ``asyncio.wait`` on a second task: this runs for
    # every async tool call, and costs less
    task.add_done_callback(wake)
    signals.wakers.append(wake)
    if signals.cancel_reason:
        wake()
    try:
        await woken
    except BaseException:
        task.cancel()
        raise
    finally:
        task.remove_done_callback(wake)
        signals.wakers.remove(wake)
    if task.done():
        return task.result()
    task.cancel()
    try:
        await asyncio.wait((task,), timeout=CANCEL_GRACE)
    except BaseException:
        _abandon(task)
        raise
    if not task.done():
        _abandon(task)
        raise ToolInterrupted(abandoned=True)
    if not task.cancelled() and task.exception() is None:
        return task.result()
    raise ToolInterrupted()


def _abandon(task: asyncio.Task[Any]) -> None:
    if not task.done():
        _ABANDONED.add(task)
        task.add_done_callback(_forget)
    elif not task.cancelled():
        task.exception()
