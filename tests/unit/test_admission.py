"""Admission (sessions_app/web/admission.py): while more turns than the backlog wait in the queue
and the workers are taking from it, a new turn's request waits, oldest first; it never waits on
a queue nobody drains, nor past its bound. The queue is a fake here (its depth and its oldest
waiting task, read by ``look``); tests/integration/test_admission.py drives the real one."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sessions_app.web.admission import DRAINING, IDLE, Gate


class Queue:
    """The depth and the oldest waiting task's mark that the gate reads."""

    def __init__(self) -> None:
        self.depth = 0
        self.head: object = None
        self.fail = False

    def __call__(self) -> tuple[int, object]:
        if self.fail:
            raise ConnectionError("the database is away")
        return self.depth, self.head


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def queue() -> Queue:
    return Queue()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def gate(queue: Queue, clock: Clock, *, backlog: int = 3, max_wait: float = 30.0) -> Gate:
    return Gate(backlog=backlog, max_wait=max_wait, depth=queue, clock=clock, reader=False)


def draining(door: Gate, queue: Queue, depth: int) -> None:
    """A reading in which the clusters took the oldest task (its mark moved on)."""
    queue.depth = depth
    queue.head = object()
    door.look()


def waiting(door: Gate, count: int) -> list[threading.Thread]:
    """``count`` requests that enter one after another on threads of their own, each in line
    before the next starts; their order of admission is appended to ``door.order``."""
    door.order = []  # type: ignore[attr-defined]
    threads = []
    for n in range(count):
        thread = threading.Thread(target=lambda n=n: (door.enter(), door.order.append(n)), daemon=True)
        thread.start()
        deadline = time.monotonic() + 5
        while len(door._waiters) < n + 1 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        threads.append(thread)
    return threads


def joined(threads: list[threading.Thread], timeout: float = 5.0) -> bool:
    for thread in threads:
        thread.join(timeout)
    return not any(thread.is_alive() for thread in threads)


def test_a_short_queue_lets_every_request_in_at_once(queue, clock):
    door = gate(queue, clock)
    draining(door, queue, 1)
    assert door.enter() == 0.0
    assert door.enter() == 0.0  # 1 waiting + 2 let in since the reading: 3, the backlog
    assert door.waited == 0


def test_requests_wait_in_line_while_the_workers_drain_a_long_queue(queue, clock):
    door = gate(queue, clock)
    draining(door, queue, 5)
    line = waiting(door, 3)
    assert not door.order and all(t.is_alive() for t in line)  # 5 >= 3: all of them wait
    draining(door, queue, 2)  # room for one
    assert joined(line[:1]) and door.order == [0]
    assert all(t.is_alive() for t in line[1:])
    draining(door, queue, 0)  # room for the other two, oldest first
    assert joined(line) and sorted(door.order) == [0, 1, 2]
    assert door.waited == 3


def test_a_queue_nobody_drains_holds_nobody(queue, clock):
    """No worker running (or every runner full): the oldest task stays put, so waiting would
    help nothing: after ``DRAINING`` seconds the line goes in, and new requests do not wait."""
    door = gate(queue, clock)
    draining(door, queue, 10)
    line = waiting(door, 2)
    clock.now += DRAINING / 2
    door.look()  # the same oldest task: not drained since, but within the window
    assert all(t.is_alive() for t in line)
    clock.now += DRAINING
    door.look()
    assert joined(line) and sorted(door.order) == [0, 1]
    assert door.enter() == 0.0


def test_an_empty_line_of_waiting_tasks_counts_as_draining(queue, clock):
    """Every task taken by a cluster (none waits unlocked): the clusters are taking them."""
    door = gate(queue, clock)
    queue.depth, queue.head = 4, None
    door.look()
    line = waiting(door, 1)
    assert line[0].is_alive()
    queue.depth = 1
    door.look()
    assert joined(line)


def test_a_request_goes_ahead_when_its_wait_runs_out(queue):
    door = Gate(backlog=1, max_wait=0.2, depth=queue, reader=False)
    draining(door, queue, 5)
    began = time.monotonic()
    waited = door.enter()
    assert 0.15 < waited and time.monotonic() - began < 3
    assert not door._waiters  # out of the line, and counted as let in
    assert door._admitted == 1


def test_an_unreadable_queue_holds_nobody(queue, clock):
    door = gate(queue, clock)
    draining(door, queue, 9)
    line = waiting(door, 1)
    queue.fail = True
    door.look()  # logged; the start itself reports the database's error
    assert joined(line)


def test_a_request_on_the_event_loop_waits_without_a_thread(queue, clock):
    door = gate(queue, clock)
    draining(door, queue, 7)

    async def main() -> float:
        entering = asyncio.ensure_future(door.aenter())
        await asyncio.sleep(0.05)
        assert not entering.done()
        assert len(door._waiters) == 1
        threading.Thread(target=draining, args=(door, queue, 0)).start()  # the reader's thread
        return await asyncio.wait_for(entering, 5)

    assert asyncio.run(main()) >= 0.0
    assert door.waited == 1


def test_a_request_that_goes_away_leaves_the_line(queue, clock):
    door = gate(queue, clock)
    draining(door, queue, 7)

    async def main() -> None:
        entering = asyncio.ensure_future(door.aenter())
        await asyncio.sleep(0.05)
        entering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await entering

    asyncio.run(main())
    assert not door._waiters


def test_the_reader_stops_once_no_request_came_for_a_while(queue, clock):
    door = gate(queue, clock)
    door.enter()
    assert door.look() is True
    clock.now += IDLE + 1
    assert door.look() is False
    assert door._reader is None


def test_the_reader_thread_lets_requests_in_by_itself(queue):
    """With its own thread (as in a web process): a waiting request is let in by the reader
    once the queue drains, with nobody calling ``look``."""
    door = Gate(backlog=2, max_wait=30, depth=queue, period=0.01)
    queue.depth, queue.head = 6, object()
    door.enter()  # starts the reader; let in (nothing seen draining yet)
    deadline = time.monotonic() + 5
    while door._drained_at == float("-inf") and time.monotonic() < deadline:
        queue.head = object()
        time.sleep(0.01)
    line = waiting(door, 1)
    assert line[0].is_alive()
    queue.depth, queue.head = 0, None
    assert joined(line)
