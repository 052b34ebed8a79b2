"""The web process's ``Waker``: a lone ring is sent at once; the rings that follow a wake-up share
the next one, sent once the gap after it has passed."""

from __future__ import annotations

import threading

from sessions_app.outbox import queue
from tests.fault.qcluster import wait_for


class HeldWaker(queue.Waker):
    """A waker whose gaps last until the test ends each one."""

    def __init__(self) -> None:
        self.gaps: list[threading.Event] = []
        super().__init__()

    def _gap(self) -> None:
        gap = threading.Event()
        self.gaps.append(gap)
        gap.wait(30)


def test_a_ring_is_sent_at_once_and_the_rings_in_the_gap_after_it_share_one(monkeypatch):
    sent: list[str] = []
    monkeypatch.setattr(queue, "wake", lambda: sent.append("wake"))
    waker = HeldWaker()
    waker.ring()
    wait_for(lambda: waker.gaps, timeout=10, what="the gap after the first wake-up")
    assert sent == ["wake"], "a lone ring's wake-up waits for no gap"
    for _ in range(50):
        waker.ring()
    assert sent == ["wake"], "rings in the gap wait for its end"
    waker.gaps[0].set()
    wait_for(lambda: len(waker.gaps) == 2, timeout=10, what="the second gap")
    assert sent == ["wake", "wake"], "the gap's rings share one wake-up"
    assert waker.sent == 2
    waker.gaps[1].set()


def test_a_wake_up_that_fails_is_sent_again(monkeypatch):
    """An idle taker's look is long: a ring whose ``NOTIFY`` failed is not dropped."""
    sent: list[str] = []
    calls: list[int] = []

    def wake() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the server went away")
        sent.append("wake")

    monkeypatch.setattr(queue, "wake", wake)
    monkeypatch.setattr(queue, "WAKER_RETRY", 0.01)
    waker = HeldWaker()
    waker.ring()
    wait_for(lambda: waker.gaps, timeout=10, what="the wake-up sent again")
    assert sent == ["wake"] and len(calls) == 2 and waker.sent == 1
    waker.gaps[0].set()
