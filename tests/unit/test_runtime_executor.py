"""A runtime makes its executor when something drives a turn with it, not before: a host's call
that only starts, cancels or answers a turn (the site's services: one runtime per call, the
turn driven by a worker) makes none, and so leaves no reference cycle (the executor's hooks are
the runtime's bound methods) for the garbage collector."""

from __future__ import annotations

import asyncio
import gc

from agents_app.providers.demo import DemoModel
from agents_app.runtime import Agent, InMemorySessionStore, Runtime, TurnStatus


class Handed:
    """A dispatcher that hands turns elsewhere (as the site's services do)."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    async def dispatch(self, turn_id, session) -> None:
        self.turns.append(turn_id)

    async def ring(self, turn_ids) -> None:
        pass


def _runtime(dispatcher=None) -> Runtime:
    return Runtime(
        store=InMemorySessionStore(),
        agents={"a": Agent("a")},
        model_for=lambda a: DemoModel(delay=0),
        dispatcher=dispatcher,
    )


def test_a_start_handed_elsewhere_makes_no_executor_and_no_cycle():
    handed = Handed()
    rt = _runtime(handed)
    turn_id = asyncio.run(rt.session("a", "k").start("hello"))
    assert handed.turns == [turn_id] and rt._executor is None
    gc.collect()
    gc.disable()
    try:
        rt = _runtime(Handed())
        asyncio.run(rt.session("a", "k2").start("hello"))
        del rt
        assert gc.collect() == 0  # nothing was left in a cycle
    finally:
        gc.enable()


def test_the_executor_is_made_once_when_asked_for_and_drives_in_process():
    rt = _runtime(Handed())
    assert rt.executor is rt.executor
    local = _runtime()  # its local dispatcher drives turns here: wired at once
    assert local.dispatcher.executor is local.executor
    result = asyncio.run(local.session("a", "k").turn("hello", timeout=10))
    assert result.status == TurnStatus.COMPLETED
