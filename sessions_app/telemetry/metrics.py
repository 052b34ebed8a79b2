"""The turn metrics (OpenTelemetry metrics; exported over OTLP with the traces). Recorded by the
observer (``otel.py``) as the engine reports turns, model calls, tool calls and compactions.
Names are listed in docs/operations.md."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import metrics

from sessions_app import pricing

#: an attempt's status -> the counter it adds to
FINISHED = {"completed": "completed", "failed": "failed", "cancelled": "cancelled", "suspended": "parked"}


class TurnMetrics:
    def __init__(self, provider: Any = None) -> None:
        meter = (provider or metrics.get_meter_provider()).get_meter("june")
        self.started = meter.create_counter("june.turns.started", "{turn}", "turns started (first attempts)")
        self.finished = {
            name: meter.create_counter(f"june.turns.{name}", "{turn}", f"turn attempts that ended {name}")
            for name in set(FINISHED.values())
        }
        self.retries = meter.create_counter("june.turns.retries", "{attempt}", "attempts after the first")
        self.lease_losses = meter.create_counter(
            "june.turns.lease_losses", "{attempt}", "attempts that stopped having lost their lease"
        )
        self.running = meter.create_up_down_counter(
            "june.turns.running", "{turn}", "turn attempts running in this process"
        )
        self.duration = meter.create_histogram("june.turn.duration", "s", "one attempt of a turn, start to end")
        self.queue_wait = meter.create_histogram("june.turn.queue_wait", "s", "queued to started")
        self.step = meter.create_histogram("june.step.duration", "s", "a model call, tool call or compaction")
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", "{token}", "tokens per model call")
        self.compactions = meter.create_counter("june.compactions", "{compaction}", "compaction steps")
        self.webhook_failures = meter.create_counter(
            "june.webhook.delivery_failures", "{try}", "webhook delivery POSTs that failed"
        )
        self.cost = meter.create_counter("june.cost", "USD", "what model calls cost (JUNE_MODEL_PRICES)")

    def turn_started(self, attrs: dict[str, Any], *, resumed: bool, attempts: int, queued_at: float | None) -> float:
        if not resumed:
            self.started.add(1, attrs)
            if queued_at is not None:
                self.queue_wait.record(max(time.time() - queued_at, 0.0), attrs)
        if attempts > 1:
            self.retries.add(1, attrs)
        self.running.add(1, attrs)
        return time.perf_counter()

    def turn_ended(self, attrs: dict[str, Any], began: float, status: str | None) -> None:
        self.running.add(-1, attrs)
        self.duration.record(time.perf_counter() - began, attrs)
        if status == "running":  # the loop's answer when another attempt took the turn over
            self.lease_losses.add(1, attrs)
        elif status in FINISHED:
            self.finished[FINISHED[status]].add(1, attrs)

    def step_ended(self, kind: str, began: float, attrs: dict[str, Any]) -> None:
        self.step.record(time.perf_counter() - began, {**attrs, "june.step.kind": kind})
        if kind == "compaction":
            self.compactions.add(1, attrs)

    def usage(self, usage: dict[str, Any], attrs: dict[str, Any], model: str | None = None) -> None:
        for ours, kind in (("input_tokens", "input"), ("output_tokens", "output")):
            if isinstance(usage.get(ours), int):
                self.tokens.record(usage[ours], {**attrs, "gen_ai.token.type": kind})
        if model is not None and (cost := pricing.cost_of(usage, model)) is not None:
            self.cost.add(cost, {**attrs, "gen_ai.request.model": model})
