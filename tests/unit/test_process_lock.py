"""sessions_app.workers.sentinel.ProcessLock: django-q2's queue locks that a dead worker cannot
keep (a worker SIGKILLed while it waited for a task held the queue's reader lock for good, and
the cluster took no task again)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from sessions_app.workers.sentinel import ProcessLock

ctx = multiprocessing.get_context("fork")


def hold(lock: ProcessLock, held) -> None:
    lock.acquire()
    held.set()
    time.sleep(60)


def test_a_lock_whose_holder_is_killed_is_free_again():
    lock = ProcessLock()
    held = ctx.Event()
    child = ctx.Process(target=hold, args=(lock, held))
    child.start()
    try:
        assert held.wait(10)
        assert not lock.acquire(timeout=0.2), "another process holds it"
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        began = time.monotonic()
        assert lock.acquire(timeout=5), "the dead holder's lock was kept"
        assert time.monotonic() - began < 1
        lock.release()
    finally:
        if child.is_alive():
            child.kill()


def test_it_excludes_processes_and_threads():
    import threading

    lock = ProcessLock()
    with lock:
        got = []
        thread = threading.Thread(target=lambda: got.append(lock.acquire(timeout=0.2)))
        thread.start()
        thread.join()
        assert got == [False]
        assert not lock.acquire(block=False)
    assert lock.acquire(block=False)
    lock.release()


@pytest.mark.parametrize("block", [True, False])
def test_a_queue_with_it_survives_a_reader_killed_while_it_waits(block):
    """The django-q2 case itself: a reader killed inside ``get()`` (holding the reader lock);
    another process then gets the next item."""
    queue = ctx.Queue()
    queue._rlock = ProcessLock()
    waiting = ctx.Process(target=queue.get)
    waiting.start()
    deadline = time.monotonic() + 10
    while queue._rlock.acquire(block=False):  # until it is inside get(), holding the reader lock
        queue._rlock.release()
        assert time.monotonic() < deadline, "the reader never waited in get()"
        time.sleep(0.01)
    os.kill(waiting.pid, signal.SIGKILL)
    waiting.join(10)
    got = ctx.Queue()
    reader = ctx.Process(target=lambda: got.put(queue.get(timeout=5) if not block else queue.get()))
    reader.start()
    queue.put("task")
    assert got.get(timeout=10) == "task"
    reader.join(10)


def set_timer_forever(timer, held) -> None:
    timer.get_lock().acquire()  # as q2's worker does around ``timer.value = …``
    held.set()
    time.sleep(60)


def test_a_worker_timer_whose_setter_is_killed_is_readable_again():
    """The sentinel's worker timers (``CrashSafeSentinel.spawn_worker``): q2's guard takes each
    timer's lock every cycle and reads and writes the value inside it (so the lock is taken
    again by its holder); a worker SIGKILLed while it held its timer's lock had wedged the guard
    for good, and no worker was spawned again."""
    from multiprocessing import Value

    from sessions_app.workers.sentinel import ReentrantProcessLock

    timer = Value("f", -1, lock=ReentrantProcessLock())
    held = ctx.Event()
    child = ctx.Process(target=set_timer_forever, args=(timer, held))
    child.start()
    try:
        assert held.wait(10)
        assert not timer.get_lock().acquire(timeout=0.2), "the worker holds it"
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert timer.get_lock().acquire(timeout=5), "the dead worker's timer lock was kept"
        try:
            timer.value -= 1  # q2's guard: the value's own lock, taken again inside
            assert timer.value == -2
        finally:
            timer.get_lock().release()
        assert timer.get_lock().acquire(timeout=0.2), "released as often as taken"
        timer.get_lock().release()
        timer.get_lock().close()
    finally:
        if child.is_alive():
            child.kill()
