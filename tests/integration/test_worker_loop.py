"""A worker process's event loop (sessions_app/workers/tasks.py): kept from task to task in a
q2 worker, and each task still ends as ``asyncio.run`` ends one — what it left running is
cancelled and awaited before ``run_turn`` returns."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sessions_app.workers import tasks


def on_a_thread(fn):
    """Run ``fn`` on a thread of its own (the kept loop is per thread) and return its result."""
    out: dict = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            out["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"]


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_a_worker_keeps_one_loop_and_ends_each_task_like_asyncio_run():
    """A loop per task cost its creation and teardown and dropped the channel layer's
    connections with it; a kept loop must still not let one task's leftovers run into the next."""
    ended: list[str] = []

    async def leaves_a_listener() -> asyncio.AbstractEventLoop:
        async def listener() -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                ended.append("listener")  # its cleanup (a group_discard, say) ran

        asyncio.get_running_loop().create_task(listener())
        await asyncio.sleep(0)
        return asyncio.get_running_loop()

    def worker() -> tuple:
        tasks.keep_event_loop()
        first = tasks._run(leaves_a_listener())
        cleaned = list(ended)
        second = tasks._run(running_loop())
        return first, second, cleaned, asyncio.all_tasks(first)

    first, second, cleaned, left = on_a_thread(worker)
    assert first is second and not first.is_closed()
    assert cleaned == ["listener"] and not left


def test_elsewhere_each_task_gets_a_fresh_asyncio_run():
    """Tests and threads that call run_turn directly keep asyncio.run's semantics."""
    def caller() -> tuple:
        return tasks._run(running_loop()), tasks._run(running_loop())

    first, second = on_a_thread(caller)
    assert first is not second and first.is_closed() and second.is_closed()


def test_a_leftover_that_ignores_its_cancel_costs_the_loop_not_the_worker(monkeypatch, caplog):
    """asyncio.run waits forever for a task that swallows its cancel; a worker must go on."""
    monkeypatch.setattr(tasks, "LEFTOVER_SECONDS", 0.2)
    release = threading.Event()

    async def stubborn_leftover() -> asyncio.AbstractEventLoop:
        async def stubborn() -> None:
            while not release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    pass  # swallowed, as a receive blocked in the wrong place can

        left.append(asyncio.get_running_loop().create_task(stubborn()))
        await asyncio.sleep(0)
        return asyncio.get_running_loop()

    def worker() -> tuple:
        tasks.keep_event_loop()
        first = tasks._run(stubborn_leftover())
        release.set()
        return first, tasks._run(running_loop())

    left: list[asyncio.Task] = []

    first, second = on_a_thread(worker)
    left[0]._log_destroy_pending = False  # it dies with its closed loop, as intended
    assert first.is_closed() and second is not first and not second.is_closed()
    assert "ignored their cancel" in caplog.text


def test_the_loop_is_kept_only_in_the_process_that_asked(monkeypatch):
    """A forked child inherits the parent's thread-local state: it must not reuse its loop."""
    def worker() -> bool:
        tasks.keep_event_loop()
        monkeypatch.setattr(tasks.os, "getpid", lambda: -1)  # as in a child after fork
        return tasks._run(running_loop()).is_closed()

    assert on_a_thread(worker)


def test_every_worker_process_keeps_its_loop():
    from django_q.signals import post_spawn

    from sessions_app.apps import _keep_event_loop

    assert _keep_event_loop in post_spawn._live_receivers("django_q")[0]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_a_task_that_raises_leaves_the_loop_usable(exc):
    async def fails() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        raise exc("boom")

    def worker() -> bool:
        tasks.keep_event_loop()
        with pytest.raises(exc):
            tasks._run(fails())
        loop = tasks._run(running_loop())
        return not loop.is_closed() and not asyncio.all_tasks(loop)

    assert on_a_thread(worker)
