"""Helpers for the engine's unit tests: a runtime on fakes, and readers of what it left."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from agents_app.runtime import (
    Agent,
    InMemorySessionStore,
    RecordingSink,
    Runtime,
    ScriptedModel,
    SessionRef,
    TurnExecutor,
)
from agents_app.runtime.events import MessageDelta


class FakeClock:
    """An injected clock: time moves only when a test says so."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class NullDispatcher:
    """Records dispatches and drives nothing: queued turns stay queued."""

    def __init__(self) -> None:
        self.dispatched: list[str] = []

    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        self.dispatched.append(turn_id)


def make_runtime(
    agent: Agent,
    model: ScriptedModel,
    *,
    store: InMemorySessionStore | None = None,
    dispatcher: Any = None,
) -> tuple[Runtime, InMemorySessionStore, RecordingSink]:
    store = store or InMemorySessionStore()
    sink = RecordingSink()
    rt = Runtime(store=store, agents={agent.name: agent}, model_for=lambda a: model, sink=sink, dispatcher=dispatcher)
    rt.executor.retry_delay = 0.0  # a retry must not make the suite wait
    return rt, store, sink


def make_executor(
    store: InMemorySessionStore, agent: Agent, model: Any, clock: FakeClock, sink: RecordingSink | None = None
) -> TurnExecutor:
    # a long lease: the heartbeat task sleeps (really) and is cancelled when the attempt ends
    return TurnExecutor(
        store=store,
        sink=sink or RecordingSink(),
        agent_for=lambda name: agent,
        model_for=lambda a: model,
        clock=clock,
        lease_seconds=30.0,
        retry_delay=0.0,
    )


def delta_texts(sink: RecordingSink) -> list[str]:
    return [e.text for _, e in sink.deltas if isinstance(e, MessageDelta)]


def roles(store: InMemorySessionStore, ref: SessionRef) -> list[str]:
    return [str(m.role) for m in store.transcript(ref)]


async def event_types(store: InMemorySessionStore, ref: SessionRef, turn_id: str | None = None) -> list[str]:
    return [e.event.type for e in await store.events(ref) if turn_id is None or e.event.turn_id == turn_id]


async def logged(store: InMemorySessionStore, ref: SessionRef, type_: str) -> list[Any]:
    return [e.event for e in await store.events(ref) if e.event.type == type_]


async def wait_until(cond: Callable[[], bool | Awaitable[bool]], timeout: float = 2.0) -> None:
    """Poll ``cond`` with a deadline (no bare sleep to wait)."""
    deadline = time.monotonic() + timeout
    while True:
        out = cond()
        if asyncio.iscoroutine(out):
            out = await out
        if out:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        await asyncio.sleep(0.005)


def assert_transcript_valid(messages: list[Any]) -> None:
    """Every tool call of an assistant message has exactly one tool message in the run of tool
    messages right after it (call ids may repeat across turns)."""
    for i, m in enumerate(messages):
        batch = []
        for x in messages[i + 1 :]:
            if str(x.role) != "tool":
                break
            batch.append(x.call_id)
        for call in m.tool_calls:
            assert batch.count(call.id) == 1, f"call {call.id} at {i} has {batch.count(call.id)} tool messages"
