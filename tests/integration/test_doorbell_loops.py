"""The cancel doorbell in a worker, whose every task runs in a fresh ``asyncio.run``: each
attempt's listener hears its ring, whatever the attempts before it left behind, and an attempt's
loop always ends, whenever the rings land. Every attempt runs on a daemon thread joined with a
deadline, so a loop that never ends fails the test instead of hanging it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from agents_app.runtime.control import Signals
from sessions_app.outbox import doorbell

# the process's group joined, the doorbell reads the rows for requests rung before the join
pytestmark = pytest.mark.django_db(transaction=True)

DEADLINE = 15.0


async def _ring(turn_id: str, times: int, reason: str = "user") -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()  # the sending side: services' global layer
    for _ in range(times):
        await layer.group_send(doorbell.CANCELS, {"type": "june.cancel", "turn_id": turn_id, "reason": reason})


async def _joined(turn_id: str, signals: Signals):
    unsubscribe = doorbell.cancel_listener(turn_id, signals)
    deadline = time.monotonic() + DEADLINE
    while not unsubscribe.joined.is_set():
        assert time.monotonic() < deadline, "the process never joined the doorbell's group"
        await asyncio.sleep(0.002)
    return unsubscribe


async def _attempt_that_dies(turn_id: str, delay: float) -> None:
    """Rings land while the attempt fails (a DeadlockDetected, say): the loop ends mid-receive."""
    unsubscribe = await _joined(turn_id, Signals())
    await _ring(turn_id, 3)
    await asyncio.sleep(delay)
    unsubscribe()
    raise RuntimeError("the attempt failed")


async def _attempt_that_listens(turn_id: str, rings: int = 3, reason: str = "user") -> str | None:
    signals = Signals()
    unsubscribe = await _joined(turn_id, signals)
    await _ring(turn_id, rings, reason)
    deadline = time.monotonic() + 5
    while signals.cancel_reason is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    unsubscribe()
    return signals.cancel_reason


def _in_a_thread(main, *args) -> tuple[bool, object]:
    """Run ``asyncio.run(main(*args))`` as a worker runs a task; (finished, result or error)."""
    out: list[object] = [None]

    def run() -> None:
        try:
            out[0] = asyncio.run(main(*args))
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            out[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    return not thread.is_alive(), out[0]


def _doorbell_failures(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == doorbell.__name__ and r.levelno >= logging.WARNING]


def test_a_listener_after_a_failed_attempt_still_hears_its_ring(caplog):
    """Pins "cancel listener stopped … Lock bound to a different event loop" (channels_redis,
    issue 13 item 9): the worker shared one layer client between the loops of its tasks, an
    attempt that ended mid-receive left the client's receive lock bound to its dead loop, and
    the next attempt's live cancel was lost. And pins the hang that followed on Redis (issue 16):
    a dying attempt's loop never finished closing."""
    caplog.set_level(logging.INFO, logger=doorbell.__name__)
    heard = []
    for n in range(16):
        finished, error = _in_a_thread(_attempt_that_dies, f"dead{n}", n * 0.0007)
        assert finished, f"attempt {n}'s loop never finished closing"
        assert isinstance(error, RuntimeError), error
        finished, reason = _in_a_thread(_attempt_that_listens, f"live{n}")
        assert finished, f"listening attempt {n}'s loop never finished closing"
        heard.append(reason)
    assert not _doorbell_failures(caplog)
    assert heard == ["user"] * 16, "a live cancel was lost"


async def _attempt_rung_as_it_ends(turn_id: str, delay: float) -> list[asyncio.Task]:
    signals = Signals()
    unsubscribe = await _joined(turn_id, signals)
    rings = asyncio.ensure_future(_ring(turn_id, 4))  # they land while the attempt ends
    await asyncio.sleep(delay)
    unsubscribe()
    await rings
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


def test_rings_at_the_end_of_an_attempt_never_keep_its_loop_open(caplog):
    """Pins the worker that hung for good at the end of a task (issue 16): the attempt's
    listener was a receive task in the attempt's loop, cancelled at the end; on Python 3.11 a
    cancel that lands while redis-py sends BZPOPMIN is swallowed (``asyncio.wait_for``, CPython
    gh-86296), the receive went on forever and ``asyncio.run`` never returned. Now the attempt
    leaves nothing running in its loop, wherever the rings land."""
    caplog.set_level(logging.INFO, logger=doorbell.__name__)
    for n in range(40):
        finished, left = _in_a_thread(_attempt_rung_as_it_ends, f"ending{n}", (n % 10) * 0.0005)
        assert finished, f"attempt {n}'s loop never finished closing"
        assert left == [], f"attempt {n} left {left} in its loop"
    assert not _doorbell_failures(caplog)


def test_attempts_of_one_turn_in_turn_each_hear_their_ring():
    """A turn re-driven in the same process (a retry, a re-enqueue) hears its ring after the
    previous attempt left. (One ring each, each its own reason: no ring of an earlier attempt is
    left to be heard.)"""
    for n in range(6):
        finished, reason = _in_a_thread(_attempt_that_listens, "again", 1, f"user{n}")
        assert finished and reason == f"user{n}", (n, reason)
