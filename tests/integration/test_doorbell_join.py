"""The doorbell's one membership (sessions_app/outbox/doorbell.py, ``CANCELS``): a worker
process's channel joins the group every ring goes to once, so an attempt costs the layer
nothing (no round trip to join or leave); an attempt hears its ring; a ring that came just
before its attempt registered is delivered when it does (read from the row); and a cancel
requested while the process was out of the group — its ring reached no one — is read from the
rows of every attempt in the table, in one query, at the join."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agents_app.runtime.control import Signals
from sessions_app.outbox import doorbell
from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Layer:
    """A channel layer that records group changes; a ring is ``deliver``. ``gate``: the join
    waits for it (a process not yet in the group)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.inbox: asyncio.Queue | None = None
        self.gate = gate

    async def new_channel(self) -> str:
        self.inbox = asyncio.Queue()
        return "process!1"

    async def group_add(self, group: str, channel: str) -> None:
        while self.gate is not None and not self.gate.is_set():
            await asyncio.sleep(0.005)
        self.calls.append(("add", group))

    async def group_discard(self, group: str, channel: str) -> None:
        self.calls.append(("discard", group))

    async def receive(self, channel: str) -> dict:
        assert self.inbox is not None
        return await self.inbox.get()

    def deliver(self, bell: doorbell.ProcessDoorbell, message: dict) -> None:
        wait_for(lambda: self.inbox is not None, timeout=10, what="the doorbell's channel")
        bell._loop.call_soon_threadsafe(self.inbox.put_nowait, message)


def listening(bell: doorbell.ProcessDoorbell, turn_id: str, seconds: float) -> Signals:
    """An attempt that listens for ``seconds`` on a loop of its own, then leaves."""
    signals = Signals()

    async def attempt() -> None:
        unsubscribe = bell.listen(turn_id, signals)
        await asyncio.sleep(seconds)
        unsubscribe()

    asyncio.run(attempt())
    return signals


def test_attempts_cost_the_layer_nothing_past_the_processs_one_join():
    """Each attempt that called a model joined a group of its turn's own and left it (three
    round trips to Redis a turn); now the process joins once, whatever its attempts do."""
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)
    for n in range(20):
        listening(bell, f"turn{n}", 0.01 * (n % 3))
    time.sleep(0.2)
    assert layer.calls == [("add", doorbell.CANCELS)]
    assert not bell._attempts


def test_an_attempt_hears_its_ring_and_leaves_nothing():
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)
    signals = Signals()

    async def attempt() -> str | None:
        unsubscribe = bell.listen("long", signals)
        while not unsubscribe.joined.is_set():
            await asyncio.sleep(0.005)
        layer.deliver(bell, {"type": "june.cancel", "turn_id": "long", "reason": "user"})
        while signals.cancel_reason is None:
            await asyncio.sleep(0.005)
        unsubscribe()
        return signals.cancel_reason

    assert asyncio.run(asyncio.wait_for(attempt(), 10)) == "user"
    assert layer.calls == [("add", doorbell.CANCELS)] and not bell._attempts


def _until_cancelled(bell: doorbell.ProcessDoorbell, turn_id: str, seconds: float = 10) -> str | None:
    signals = Signals()

    async def attempt() -> str | None:
        unsubscribe = bell.listen(turn_id, signals)
        deadline = time.monotonic() + seconds
        while signals.cancel_reason is None and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        unsubscribe()
        return signals.cancel_reason

    return asyncio.run(attempt())


def test_a_ring_just_before_the_attempt_registered_is_read_from_the_row(fault_agent):
    """A ring that finds no attempt of its turn (it came between the claim's commit and the
    attempt's registration) is kept: the attempt that registers soon after reads its row. A
    kept ring whose row holds no request cancels nothing."""
    from bench.common import start
    from sessions_app import models as m

    rung, stale = start("rung-early", "steps:1"), start("rung-stale", "steps:1")
    m.Turn.objects.filter(pk=rung).update(cancel_reason="user")
    layer = Layer()
    bell = doorbell.ProcessDoorbell(layer)
    for turn_id in (rung, stale):
        layer.deliver(bell, {"type": "june.cancel", "turn_id": turn_id})
    wait_for(lambda: len(bell._early) == 2, timeout=10, what="the rings kept")
    assert _until_cancelled(bell, rung) == "user"
    assert _until_cancelled(bell, stale, seconds=0.5) is None
    assert not bell._early


def test_requests_made_while_out_of_the_group_are_read_at_the_join_in_one_query(fault_agent, monkeypatch):
    """A ring sent before the process joined (or while Redis was away) reached no one: at the
    join the rows of every attempt in the table are read, all in one query."""
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
    gate = threading.Event()
    bell = doorbell.ProcessDoorbell(Layer(gate))
    signals = [Signals() for _ in turn_ids]

    async def attempts() -> list[str | None]:
        unsubscribe = [bell.listen(t, s) for t, s in zip(turn_ids, signals)]
        assert not any(u.joined.is_set() for u in unsubscribe)
        gate.set()
        deadline = time.monotonic() + 10
        while not all(s.cancel_reason for s in signals[:2]) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert all(u.joined.is_set() for u in unsubscribe)
        for u in unsubscribe:
            u()
        return [s.cancel_reason for s in signals]

    assert asyncio.run(asyncio.wait_for(attempts(), 20)) == ["user", "user", None, None, None, None]
    assert reads == [sorted(turn_ids)]
