"""The in-process parts of a runtime: an event bus for observers (``AgentSession.observe``), a
sink that fans events out to several, and a dispatcher that drives turns as asyncio tasks here
(tests, the CLI, schedules run in-process). A site's are the channel layer and django-q2."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .events import TurnEvent
from .seams import EventSink, LoggedEvent, SessionRef

if TYPE_CHECKING:
    from .executor import TurnExecutor


class LocalBus:
    """An EventSink fanning events out to in-process observers (``observe``)."""

    def __init__(self) -> None:
        self._observers: dict[SessionRef, list[Callable[[TurnEvent], Any]]] = {}

    def subscribe(self, session: SessionRef, fn: Callable[[TurnEvent], Any]) -> Callable[[], None]:
        self._observers.setdefault(session, []).append(fn)
        return lambda: self._observers.get(session, []).remove(fn) if fn in self._observers.get(session, []) else None

    async def _fan(self, session: SessionRef, event: TurnEvent) -> None:
        for fn in list(self._observers.get(session, ())):
            out = fn(event)
            if asyncio.iscoroutine(out):
                await out

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        for logged in events:
            await self._fan(session, logged.event)

    async def delta(self, session: SessionRef, event: TurnEvent) -> None:
        await self._fan(session, event)


class FanoutSink:
    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = [s for s in sinks if s is not None]

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        for sink in self.sinks:
            await sink.publish(session, events)

    async def delta(self, session: SessionRef, event: TurnEvent) -> None:
        for sink in self.sinks:
            await sink.delta(session, event)

    async def close(self) -> None:
        """Let every sink that buffers send what it holds."""
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                await close()


class LocalDispatcher:
    """Drives turns as asyncio tasks in this process, one session chain at a time."""

    def __init__(self) -> None:
        self.executor: TurnExecutor | None = None
        self.tasks: set[asyncio.Task[Any]] = set()

    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        task = asyncio.get_running_loop().create_task(self._run(turn_id, session))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, turn_id: str, session: SessionRef) -> None:
        # the unit that settles the turn for good dispatches the chain's next turn (on_runnable)
        assert self.executor is not None
        await self.executor.drive(turn_id)

    async def ring(self, turn_ids: Sequence[str]) -> None:
        return None  # attempts in this process are signalled through Runtime.live

    async def idle(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
