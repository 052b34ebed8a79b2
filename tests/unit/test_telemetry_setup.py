"""Whether traces are on, decided from the environment in a fresh process: off with no OTEL_*
(no observer, OpenTelemetry not even imported), on with an OTLP endpoint or a test file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
import django
django.setup()  # JUNE_OTEL_TEST_FILE is a Django setting
from sessions_app import telemetry
obs = telemetry.observer()
out = {"on": obs is not None, "same": telemetry.observer() is obs, "otel": "opentelemetry.trace" in sys.modules}
if obs is not None:
    from opentelemetry import metrics, trace
    with trace.get_tracer("probe").start_as_current_span("req"):
        out["traceparent"] = telemetry.traceparent()
    out["meters"] = type(metrics.get_meter_provider()).__name__
print(json.dumps(out))
"""


def probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JUNE_OTEL"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_off_without_otel_variables_imports_nothing():
    assert probe() == {"on": False, "same": True, "otel": False}


def test_disabled_wins_over_an_endpoint():
    assert probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_SDK_DISABLED="true")["on"] is False


def test_an_endpoint_turns_traces_and_metrics_on():
    out = probe(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_METRIC_EXPORT_INTERVAL="600000",
        OTEL_BSP_SCHEDULE_DELAY="600000",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    assert out["on"] and out["same"] and out["meters"] == "MeterProvider"
    assert out["traceparent"].startswith("00-") and len(out["traceparent"].split("-")) == 4


def test_the_test_file_gets_json_lines(tmp_path):
    path = tmp_path / "spans.jsonl"
    out = probe(JUNE_OTEL_TEST_FILE=str(path))
    [span] = [json.loads(line) for line in path.read_text().splitlines()]
    assert span["name"] == "req" and span["parent_id"] is None
    assert out["traceparent"] == f"00-{span['trace_id']}-{span['span_id']}-{out['traceparent'][-2:]}"
