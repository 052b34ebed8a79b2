"""Traces and metrics through the Django path: a signed webhook POST makes a turn, django-q2
(sync) runs it on the Django store, the result is POSTed to a real local HTTP receiver that keeps
failing. The request span is the parent of the worker's turn span; the failures are counted.
A schedule tick's span is the parent of its turn's."""

from __future__ import annotations

from datetime import UTC

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents_app.models import DeliveryStatus, WebhookDelivery
from sessions_app import models as m
from sessions_app.telemetry import setup
from sessions_app.telemetry.otel import OtelObserver

from .test_proactive import demo_user, env, q2_sync, receiver, signed_post  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def installed(monkeypatch):
    """The observer a site with OTEL_* set gets, on providers of the test's own."""
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(setup, "_OBSERVER", OtelObserver(provider, MeterProvider(metric_readers=[reader])))
    monkeypatch.setattr(setup, "_DECIDED", True)
    return exporter, reader


def test_a_webhook_turn_is_one_trace_from_the_request_and_failures_are_counted(client, q2_sync, receiver, installed):
    exporter, reader = installed
    rcv = receiver(failures=100)
    r = signed_post(client, {"session": "hook-otel", "text": "secret stock words"})
    assert r.status_code == 202
    turn = m.Turn.objects.get(pk=r.json()["turn_id"])
    assert turn.status == "completed"
    delivery = WebhookDelivery.objects.get(pk=r.json()["delivery"])
    assert delivery.status == DeliveryStatus.FAILED and len(rcv.received) == 4
    spans = exporter.get_finished_spans()
    [request] = [s for s in spans if s.name == "turn_start webhook"]
    [agent_span] = [s for s in spans if s.name == "invoke_agent ops"]
    assert turn.input["trace"].split("-")[1] == format(request.context.trace_id, "032x")
    assert agent_span.parent.span_id == request.context.span_id
    assert agent_span.context.trace_id == request.context.trace_id
    assert agent_span.attributes["june.turn.source"] == "webhook"
    steps = [s for s in spans if s.parent is not None and s.parent.span_id == agent_span.context.span_id]
    assert {s.attributes["gen_ai.operation.name"] for s in steps} == {"chat", "execute_tool"}
    assert not any("secret" in str(v) for s in spans for v in s.attributes.values())
    found = {
        metric.name: list(metric.data.data_points)
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }
    failures = {p.attributes["june.delivery.final"]: p.value for p in found["june.webhook.delivery_failures"]}
    assert failures == {False: 3, True: 1}
    assert sum(p.value for p in found["june.turns.completed"]) == 1


def test_a_schedule_tick_starts_the_trace_of_its_turn(installed, demo_user):
    from datetime import datetime, timezone

    from sessions_app.proactive.schedules import fire, schedules_sync

    exporter, _ = installed
    schedules_sync()
    intended = datetime.now(UTC).replace(second=0, microsecond=0).isoformat()
    assert fire("ops", "daily-summary", intended=intended) == "fired"
    spans = exporter.get_finished_spans()
    [tick] = [s for s in spans if s.name == "schedule_tick"]
    [agent_span] = [s for s in spans if s.name == "invoke_agent ops"]
    assert agent_span.parent.span_id == tick.context.span_id
    assert tick.attributes["june.schedule"] == "june:ops:daily-summary"
    assert agent_span.attributes["june.turn.source"] == "schedule"
