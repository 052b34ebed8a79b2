"""Fakes for tests of the engine: a scripted model and a sink that records."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

from .events import TurnEvent
from .messages import ToolCall
from .model import ModelChunk, ModelError, ModelReply, ModelRequest, StopReason, TextDelta
from .seams import LoggedEvent, SessionRef

Script = Callable[[ModelRequest], Iterable[ModelChunk] | ModelReply | Exception]


def reply(
    text: str = "",
    *calls: tuple[str, dict[str, Any]] | ToolCall,
    stop: StopReason | None = None,
    usage: dict[str, int] | None = None,
    call_prefix: str = "c",
) -> ModelReply:
    tool_calls = tuple(
        c if isinstance(c, ToolCall) else ToolCall(id=f"{call_prefix}{i}", name=c[0], input=c[1])
        for i, c in enumerate(calls)
    )
    if stop is None:
        stop = StopReason.TOOL_USE if tool_calls else StopReason.END_TURN
    return ModelReply(text=text, tool_calls=tool_calls, stop_reason=stop, usage=usage or {})


class ScriptedModel:
    """Replies from a list (one per model call) or a function of the request.

    Each text reply is streamed as deltas of ``chunk`` characters. An Exception in the
    script is raised instead of replying. ``calls`` counts model calls, ``requests`` keeps them.
    """

    def __init__(
        self, script: Sequence[ModelReply | Exception] | Script, *, chunk: int = 4, delay: float = 0.0
    ) -> None:
        self.script = script
        self.chunk = chunk
        self.delay = delay
        self.requests: list[ModelRequest] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    def _next(self, request: ModelRequest) -> Any:
        if callable(self.script):
            return self.script(request)
        n = len(self.requests) - 1
        if n >= len(self.script):
            raise ModelError("ScriptedModel: script exhausted", retryable=False)
        return self.script[n]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        self.requests.append(request)
        step = self._next(request)
        if isinstance(step, Exception):
            raise step
        if isinstance(step, ModelReply):
            text = step.text
            for i in range(0, len(text), self.chunk):
                if self.delay:
                    await asyncio.sleep(self.delay)
                yield TextDelta(text[i : i + self.chunk])
            yield step
            return
        for chunk in step:
            if self.delay:
                await asyncio.sleep(self.delay)
            yield chunk


class RecordingSink:
    """An EventSink that keeps what it was given (``published`` and ``deltas``)."""

    def __init__(self) -> None:
        self.published: list[tuple[SessionRef, LoggedEvent]] = []
        self.deltas: list[tuple[SessionRef, TurnEvent]] = []

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        self.published.extend((session, e) for e in events)

    async def delta(self, session: SessionRef, event: TurnEvent) -> None:
        self.deltas.append((session, event))

    def types(self) -> list[str]:
        return [e.event.type for _, e in self.published]
