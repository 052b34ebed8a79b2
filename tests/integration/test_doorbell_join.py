"""The doorbell's deferred join (sessions_app/outbox/doorbell.py, ``JOIN_AFTER``): an attempt
joins its turn's cancel group only once it has listened ``JOIN_AFTER``, so a short turn costs
the doorbell nothing (no layer round trip to join or leave, no wake-up of its thread); a longer
one joins, hears rings, and leaves the group when it ends; and a cancel requested before the
join — its ring reached no one — is read from the row and delivered at the join."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents_app.runtime.control import Signals
from sessions_app.outbox import doorbell
from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Layer:
    """A channel layer that records group changes; a ring is ``deliver``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.inbox: asyncio.Queue | None = None

    async def new_channel(self) -> str:
        self.inbox = asyncio.Queue()
        return "process!1"

    async def group_add(self, group: str, channel: str) -> None:
        self.calls.append(("add", group))

    async def group_discard(self, group: str, channel: str) -> None:
        self.calls.append(("discard", group))

    async def receive(self, channel: str) -> dict:
        assert self.inbox is not None
        return await self.inbox.get()


def listening(bell: doorbell.ProcessDoorbell, turn_id: str, seconds: float) -> Signals:
    """An attempt that listens for ``seconds`` on a loop of its own, then leaves."""
    signals = Signals()

    async def attempt() -> None:
        unsubscribe = bell.listen(turn_id, signals)
        await asyncio.sleep(seconds)
        unsubscribe()

    asyncio.run(attempt())
    return signals


def test_a_short_attempt_never_touches_the_layer():
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)
    for n in range(20):
        listening(bell, f"short{n}", 0)
    time.sleep(doorbell.JOIN_AFTER * 3)  # past every due time: a join would have been asked for
    assert layer.calls == []
    assert not bell._since and not bell._wanted and not bell._attempts


def test_a_longer_attempt_joins_hears_its_ring_and_leaves():
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)
    signals = Signals()

    async def attempt() -> str | None:
        unsubscribe = bell.listen("long", signals)
        while not unsubscribe.joined.is_set():
            await asyncio.sleep(0.005)
        bell._loop.call_soon_threadsafe(
            layer.inbox.put_nowait, {"type": "june.cancel", "turn_id": "long", "reason": "user"}
        )
        while signals.cancel_reason is None:
            await asyncio.sleep(0.005)
        unsubscribe()
        return signals.cancel_reason

    assert asyncio.run(asyncio.wait_for(attempt(), 10)) == "user"
    wait_for(lambda: ("discard", doorbell.cancel_group("long")) in layer.calls, timeout=10, what="the leave")
    assert layer.calls == [("add", doorbell.cancel_group("long")), ("discard", doorbell.cancel_group("long"))]


def test_a_cancel_requested_before_the_join_is_delivered_at_the_join(fault_agent):
    from bench.common import start
    from sessions_app import models as m

    turn_id = start("rung-early", "steps:1")
    m.Turn.objects.filter(pk=turn_id).update(cancel_reason="user")  # its ring reached no one
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)
    signals = Signals()

    async def attempt() -> str | None:
        unsubscribe = bell.listen(turn_id, signals)
        deadline = time.monotonic() + 10
        while signals.cancel_reason is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        unsubscribe()
        return signals.cancel_reason

    assert asyncio.run(attempt()) == "user"
    assert layer.calls[0] == ("add", doorbell.cancel_group(turn_id))


def test_a_burst_of_joins_reads_the_stored_requests_in_one_query(fault_agent, monkeypatch):
    """A burst of turns past ``JOIN_AFTER`` read their stored cancel requests one query per
    turn: a thousand turns started at once were a thousand reads on the doorbell's thread."""
    import threading

    from bench.common import start
    from sessions_app import models as m

    turn_ids = [start(f"burst{n}", "steps:1") for n in range(6)]
    m.Turn.objects.filter(pk__in=turn_ids[:2]).update(cancel_reason="user")
    reads: list[list[str]] = []
    stored = doorbell._stored_reasons

    async def counted(ids: list[str]) -> dict[str, str]:
        reads.append(list(ids))
        return await stored(ids)

    monkeypatch.setattr(doorbell, "_stored_reasons", counted)
    bell = doorbell.ProcessDoorbell(Layer())
    gate = threading.Event()
    bell._loop.call_soon_threadsafe(gate.wait, 10)  # the doorbell's loop held while the burst arrives
    signals = [Signals() for _ in turn_ids]

    async def attempts() -> list[str | None]:
        unsubscribe = [bell.listen(t, s) for t, s in zip(turn_ids, signals)]
        await asyncio.sleep(doorbell.JOIN_AFTER * 2)  # every one due by the time the loop looks
        gate.set()
        deadline = time.monotonic() + 10
        while not all(s.cancel_reason for s in signals[:2]) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        for u in unsubscribe:
            u()
        return [s.cancel_reason for s in signals]

    assert asyncio.run(asyncio.wait_for(attempts(), 20)) == ["user", "user", None, None, None, None]
    assert reads == [turn_ids]


def test_a_turn_that_left_and_came_back_joins_after_it_came_back(monkeypatch):
    """The turns wait to join in the order they came (``_pending``): a tick reads only those
    due. A turn that left before its join was due and listened again later waits
    ``JOIN_AFTER`` from its return, not from its first listen; its first entry is dropped."""
    from types import SimpleNamespace

    clock = [1000.0]
    monkeypatch.setattr(doorbell, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)

    async def listen(turn_id: str) -> doorbell.Subscription:
        return bell.listen(turn_id, Signals())

    gone = asyncio.run(listen("back"))
    others = [asyncio.run(listen(f"other{n}")) for n in range(50)]
    gone()
    for sub in others:
        sub()
    clock[0] += doorbell.JOIN_AFTER * 0.8
    again = asyncio.run(listen("back"))
    clock[0] += doorbell.JOIN_AFTER * 0.4  # past the first listen's due time, not the return's
    time.sleep(0.3)  # the doorbell's ticks run (on its loop's own clock) and find nothing due
    assert layer.calls == []
    clock[0] += doorbell.JOIN_AFTER
    wait_for(again.joined.is_set, timeout=10, what="the join")
    assert layer.calls == [("add", doorbell.cancel_group("back"))]
    with bell._lock:
        assert not bell._pending  # every entry read, the stale ones dropped
    again()
    wait_for(lambda: len(layer.calls) == 2, timeout=10, what="the leave")
