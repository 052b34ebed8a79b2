"""The observer seam: who watches a turn (traces, metrics) without the engine knowing how.

The engine holds an optional ``TurnObserver``; with none (the default) it checks ``None`` and
does nothing else: no tracer is called per step. The OpenTelemetry observer lives outside the
engine (``sessions_app/telemetry``): this module imports neither Django nor OpenTelemetry.
"""

from __future__ import annotations

from typing import Any, ContextManager, Protocol


class Watch(Protocol):
    """One watched unit (a turn, a model call, a tool call): attributes learned while it runs."""

    def record(self, **attrs: Any) -> None: ...


class TurnObserver(Protocol):
    def turn(self, turn: Any, agent: str, *, resumed: bool) -> ContextManager[Watch]:
        """One attempt of one turn; ``resumed``: it continues an earlier attempt (a crash, an
        answer to a parked question), so it is linked to the turn's trace, not a child of it."""
        ...

    def model_call(self, turn: Any, model: str | None) -> ContextManager[Watch]: ...

    def tool_call(self, turn: Any, name: str, call_id: str) -> ContextManager[Watch]: ...

    def compaction(self, turn: Any, reason: str) -> ContextManager[Watch]: ...

    def carrier(self) -> str | None:
        """The current trace context (W3C traceparent), stored with a turn this one spawns."""
        ...
