"""Whether traces are on, and the tracer provider when they are.

On when an ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (OTLP
over HTTP, the SDK reads the rest of ``OTEL_*``), when ``JUNE_OTEL_TEST_FILE`` names a JSON-lines
file (the fault tests read the spans of several processes), or when something (a test) already
installed a tracer provider. ``OTEL_SDK_DISABLED=true`` turns it off. Decided once per process.
The ``OTEL_*`` variables are the OpenTelemetry SDK's own: it reads them itself, and so does
this module. ``JUNE_OTEL_TEST_FILE`` is a Django setting, as every June setting is.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

_LOCK = threading.Lock()
_DECIDED = False
_OBSERVER: Any = None

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def _wanted() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if settings.JUNE_OTEL_TEST_FILE:  # a Django setting (june.settings), as every JUNE_*
        return True
    return any(os.environ.get(v) for v in ENDPOINT_VARS)  # the OpenTelemetry SDK's own variables


def _installed() -> bool:
    """A tracer provider someone (a test) installed; imports nothing: an SDK provider was made by
    code that imported the SDK (OpenTelemetry's API alone is loaded by others, redis's client
    among them, and the SDK is dozens of modules a worker would import for this question)."""
    import sys

    sdk = sys.modules.get("opentelemetry.sdk.trace")
    api = sys.modules.get("opentelemetry.trace")
    if sdk is None or api is None:
        return False
    return isinstance(api.get_tracer_provider(), sdk.TracerProvider)


def _install() -> None:
    if importlib.util.find_spec("opentelemetry.sdk") is None or (
        any(os.environ.get(v) for v in ENDPOINT_VARS)
        and importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is None
    ):
        raise ImproperlyConfigured(
            "OTEL_EXPORTER_OTLP_ENDPOINT (or JUNE_OTEL_TEST_FILE) is set, and OpenTelemetry's SDK and "
            "exporter are not installed: pip install 'june-django[otel]' (or unset it)"
        )
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "june")})
    provider = TracerProvider(resource=resource)
    path = settings.JUNE_OTEL_TEST_FILE
    if path:
        from .filexport import JsonLinesExporter

        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    if any(os.environ.get(v) for v in ENDPOINT_VARS):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _install_metrics(resource)
    trace.set_tracer_provider(provider)


def _install_metrics(resource: Any) -> None:
    """OTLP metrics beside the traces (``OTEL_METRIC_EXPORT_INTERVAL`` sets the period)."""
    from opentelemetry import metrics
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if os.environ.get("OTEL_METRICS_EXPORTER", "otlp").lower() == "none":
        return
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))


def observer(model_of: Any = None) -> Any:
    """The engine's observer, or None when traces are off (decided on the first call).
    ``model_of(agent name)``: the agent's model id, which prices its calls (``june.cost``)."""
    global _DECIDED, _OBSERVER
    if _DECIDED:
        return _OBSERVER
    with _LOCK:
        if not _DECIDED:
            if _wanted():
                _install()
            if _wanted() or _installed():
                from .otel import OtelObserver

                _OBSERVER = OtelObserver(model_of=model_of)
            _DECIDED = True
    return _OBSERVER


def reset_for_tests() -> None:
    global _DECIDED, _OBSERVER
    with _LOCK:
        _DECIDED, _OBSERVER = False, None


def request(name: str, **attrs: Any) -> Any:
    """A span for the request that makes a turn (a POST, a websocket message, a webhook), the
    parent of the turn's spans; a no-op context when traces are off."""
    obs = observer()
    if obs is None:
        from contextlib import nullcontext

        return nullcontext()
    return obs.request(name, attrs)


def traceparent() -> str | None:
    """The current span's W3C traceparent, stored with a turn a request creates; None when traces
    are off or no span is current."""
    obs = observer()
    return obs.carrier() if obs is not None else None


def webhook_failure(agent: str, *, final: bool) -> None:
    """A webhook delivery's POST failed (``final``: its last try, the delivery is failed)."""
    obs = observer()
    if obs is not None:
        obs.metrics.webhook_failures.add(1, {"gen_ai.agent.name": agent, "june.delivery.final": final})
