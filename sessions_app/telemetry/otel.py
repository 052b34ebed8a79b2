"""The engine's observer on OpenTelemetry: a span per turn attempt (``invoke_agent``), per model
call (``chat``), per tool call (``execute_tool``) and per compaction, with the GenAI semantic
conventions' attributes. Message content is never recorded here."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .metrics import TurnMetrics

_PROPAGATOR = TraceContextTextMapPropagator()
SYSTEM = "june"


class _Watch:
    __slots__ = ("span", "metrics", "labels", "status", "model")

    def __init__(self, span: Any, metrics: TurnMetrics | None = None, labels: dict[str, Any] | None = None) -> None:
        self.span, self.metrics, self.labels = span, metrics, labels or {}
        self.status: str | None = None
        self.model: str | None = None  # a model call's priced model id (the june.cost metric)

    def record(self, **attrs: Any) -> None:
        served_by = attrs.pop("served_by", None)
        if served_by:  # ``<provider>:<model>``: a fallback list answers from another provider
            provider, _, model = served_by.partition(":")
            self.span.set_attribute("gen_ai.provider.name", provider)
            self.span.set_attribute("gen_ai.response.model", model)
            self.model = served_by  # priced as the model that answered (``pricing.price_for``)
        usage = attrs.pop("usage", None)
        if usage and self.metrics is not None:
            self.metrics.usage(usage, self.labels, self.model)
        if usage:
            for ours, theirs in (
                ("input_tokens", "gen_ai.usage.input_tokens"),
                ("output_tokens", "gen_ai.usage.output_tokens"),
            ):
                if isinstance(usage.get(ours), int):
                    self.span.set_attribute(theirs, usage[ours])
        if "stop_reason" in attrs:
            self.span.set_attribute("gen_ai.response.finish_reasons", [attrs.pop("stop_reason")])
        status = attrs.pop("status", None)
        if status is not None:
            self.status = status
            self.span.set_attribute("june.turn.status", status)
            if status == "failed":
                self.span.set_status(Status(StatusCode.ERROR))


def _extract(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    span_ctx = trace.get_current_span(ctx).get_span_context()
    return ctx if span_ctx.is_valid else None


def _labels(turn: Any) -> dict[str, Any]:
    """The metrics' attributes: few values each (no ids)."""
    return {"gen_ai.agent.name": turn.session.agent, "june.turn.source": turn.input.source or ""}


def _turn_attrs(turn: Any) -> dict[str, Any]:
    return {
        "gen_ai.agent.name": turn.session.agent,
        "gen_ai.conversation.id": str(turn.session),
        "june.turn.id": turn.turn_id,
        "june.turn.source": turn.input.source or "",
        "june.turn.attempt": turn.attempts,
    }


class OtelObserver:
    def __init__(
        self, provider: Any = None, meter_provider: Any = None, model_of: Callable[[str], str] | None = None
    ) -> None:
        """``provider``, ``meter_provider``: of its own (tests); else the global ones.
        ``model_of(agent name)``: the model id its calls are priced at (none: no cost metric)."""
        self.tracer = (provider or trace.get_tracer_provider()).get_tracer("june")
        self.metrics = TurnMetrics(meter_provider)
        self.model_of = model_of

    @contextmanager
    def turn(self, turn: Any, agent: str, *, resumed: bool) -> Iterator[_Watch]:
        stored = _extract(turn.input.trace)
        attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.system": SYSTEM,
            **_turn_attrs(turn),
            "june.turn.resumed": resumed,
        }
        if stored is not None and resumed:  # a new trace, linked to the one the request began
            link = Link(trace.get_current_span(stored).get_span_context())
            parent, links = otel_context.Context(), [link]
        else:
            parent, links = (stored if stored is not None else otel_context.Context()), []
        labels = _labels(turn)
        began = self.metrics.turn_started(
            labels, resumed=resumed, attempts=turn.attempts, queued_at=turn.input.queued_at
        )
        watch: _Watch | None = None
        try:
            with self.tracer.start_as_current_span(
                f"invoke_agent {agent}", context=parent, links=links, kind=trace.SpanKind.INTERNAL, attributes=attrs
            ) as span:
                watch = _Watch(span, self.metrics, labels)
                yield watch
        finally:
            self.metrics.turn_ended(labels, began, watch.status if watch is not None else None)

    @contextmanager
    def _step(self, step: str, turn: Any, name: str, attrs: dict[str, Any], **kw: Any) -> Iterator[_Watch]:
        labels = _labels(turn)
        began = time.perf_counter()
        try:
            with self.tracer.start_as_current_span(name, attributes=attrs, **kw) as span:
                yield _Watch(span, self.metrics, labels)
        finally:
            self.metrics.step_ended(step, began, labels)

    @contextmanager
    def model_call(self, turn: Any, model: str | None) -> Iterator[_Watch]:
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": SYSTEM,
            "gen_ai.request.model": model or "",
            "gen_ai.conversation.id": str(turn.session),
        }
        with self._step("chat", turn, f"chat {model or ''}".strip(), attrs, kind=trace.SpanKind.CLIENT) as watch:
            watch.model = self.model_of(turn.session.agent) if self.model_of is not None else None
            yield watch

    @contextmanager
    def tool_call(self, turn: Any, name: str, call_id: str) -> Iterator[_Watch]:
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.conversation.id": str(turn.session),
        }
        with self._step("execute_tool", turn, f"execute_tool {name}", attrs) as watch:
            yield watch

    @contextmanager
    def compaction(self, turn: Any, reason: str) -> Iterator[_Watch]:
        attrs = {
            "gen_ai.operation.name": "compaction",
            "june.compaction.reason": reason,
            "gen_ai.conversation.id": str(turn.session),
        }
        with self._step("compaction", turn, "compaction", attrs) as watch:
            yield watch

    @contextmanager
    def request(self, name: str, attrs: dict[str, Any]) -> Iterator[Any]:
        """The request's span (the host's, not the engine's): a turn made inside it joins its trace."""
        clean = {k: v for k, v in attrs.items() if isinstance(v, (str, int, float, bool))}
        with self.tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER, attributes=clean) as span:
            yield span

    def carrier(self) -> str | None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")
