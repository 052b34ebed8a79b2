"""A span exporter writing one JSON object a line (``JUNE_OTEL_TEST_FILE``): the fault tests
read the spans of several worker processes from one file."""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Sequence

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


def span_json(span: Any) -> dict[str, Any]:
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "links": [
            {"trace_id": format(link.context.trace_id, "032x"), "span_id": format(link.context.span_id, "016x")}
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "pid": os.getpid(),
    }


class JsonLinesExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        lines = "".join(json.dumps(span_json(s), default=str) + "\n" for s in spans)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)  # one write per batch, O_APPEND: lines of two processes do not mix
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None
