"""The engine's observer on OpenTelemetry: a span per turn attempt (``invoke_agent``), per model
call (``chat``), per tool call (``execute_tool``) and per compaction, with the GenAI semantic
conventions' attributes. Message content is never recorded here."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
SYSTEM = "june"


class _Watch:
    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def record(self, **attrs: Any) -> None:
        usage = attrs.pop("usage", None)
        if usage:
            for ours, theirs in (("input_tokens", "gen_ai.usage.input_tokens"),
                                 ("output_tokens", "gen_ai.usage.output_tokens")):
                if isinstance(usage.get(ours), int):
                    self.span.set_attribute(theirs, usage[ours])
        if "stop_reason" in attrs:
            self.span.set_attribute("gen_ai.response.finish_reasons", [attrs.pop("stop_reason")])
        status = attrs.pop("status", None)
        if status is not None:
            self.span.set_attribute("june.turn.status", status)
            if status == "failed":
                self.span.set_status(Status(StatusCode.ERROR))


def _extract(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    span_ctx = trace.get_current_span(ctx).get_span_context()
    return ctx if span_ctx.is_valid else None


def _turn_attrs(turn: Any) -> dict[str, Any]:
    return {
        "gen_ai.agent.name": turn.session.agent,
        "gen_ai.conversation.id": str(turn.session),
        "june.turn.id": turn.turn_id,
        "june.turn.source": turn.input.source or "",
        "june.turn.attempt": turn.attempts,
    }


class OtelObserver:
    def __init__(self, provider: Any = None) -> None:
        """``provider``: a tracer provider of its own (tests); else the global one."""
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("june")

    @contextmanager
    def turn(self, turn: Any, agent: str, *, resumed: bool) -> Iterator[_Watch]:
        stored = _extract(turn.input.trace)
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.system": SYSTEM, **_turn_attrs(turn),
                 "june.turn.resumed": resumed}
        if stored is not None and resumed:  # a new trace, linked to the one the request began
            link = Link(trace.get_current_span(stored).get_span_context())
            parent, links = otel_context.Context(), [link]
        else:
            parent, links = (stored if stored is not None else otel_context.Context()), []
        with self.tracer.start_as_current_span(f"invoke_agent {agent}", context=parent, links=links,
                                               kind=trace.SpanKind.INTERNAL, attributes=attrs) as span:
            yield _Watch(span)

    @contextmanager
    def model_call(self, turn: Any, model: str | None) -> Iterator[_Watch]:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.system": SYSTEM,
                 "gen_ai.request.model": model or "", "gen_ai.conversation.id": str(turn.session)}
        with self.tracer.start_as_current_span(f"chat {model or ''}".strip(), kind=trace.SpanKind.CLIENT,
                                               attributes=attrs) as span:
            yield _Watch(span)

    @contextmanager
    def tool_call(self, turn: Any, name: str, call_id: str) -> Iterator[_Watch]:
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.tool.call.id": call_id, "gen_ai.conversation.id": str(turn.session)}
        with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs) as span:
            yield _Watch(span)

    @contextmanager
    def compaction(self, turn: Any, reason: str) -> Iterator[_Watch]:
        attrs = {"gen_ai.operation.name": "compaction", "june.compaction.reason": reason,
                 "gen_ai.conversation.id": str(turn.session)}
        with self.tracer.start_as_current_span("compaction", attributes=attrs) as span:
            yield _Watch(span)

    def carrier(self) -> str | None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")
