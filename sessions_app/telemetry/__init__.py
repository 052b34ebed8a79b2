"""OpenTelemetry for June: the engine's observer (``otel.py``), set up from the standard
``OTEL_*`` environment variables (``setup.py``). Off when none is set: ``observer()`` is None and
the engine checks None, nothing more."""

from .setup import observer, request, traceparent, webhook_failure

__all__ = ["observer", "request", "traceparent", "webhook_failure"]
