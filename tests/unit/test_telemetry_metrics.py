"""Metrics on the fakes: what an in-memory metric reader holds after a tool turn, a parked turn
answered later and a failed one (the real OpenTelemetry observer on providers of its own)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from agents_app.runtime import Agent, ModelError, ScriptedModel, TurnStatus, reply, tool
from sessions_app.telemetry.otel import OtelObserver

from ._support import make_runtime


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def total(found: dict[str, list[Any]], name: str) -> int:
    return sum(p.value for p in found.get(name, []))


async def test_turn_counters_durations_tokens_and_parks():
    reader = InMemoryMetricReader()
    obs = OtelObserver(TracerProvider(), MeterProvider(metric_readers=[reader]))

    @tool("deploy", "asks first")
    async def deploy(input: dict[str, Any], ctx: Any) -> Any:
        return {"ok": await ctx.request_input(id="approve", prompt="Deploy?", schema={"type": "boolean"})}

    agent = Agent("a", "instr", tools=[deploy])
    model = ScriptedModel(
        [
            reply("", ("deploy", {}), usage={"input_tokens": 10, "output_tokens": 4}),
            reply("deployed", usage={"input_tokens": 30, "output_tokens": 2}),
            ModelError("broken", retryable=False),
        ]
    )
    rt, store, _ = make_runtime(agent, model)
    rt.observer = rt.executor.observer = obs
    s = rt.session("a", "s1")
    tid = await s.start("go")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.SUSPENDED
    await s.resume(tid, "approve", True)
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    failing = await s.start("again")
    assert (await s.result(failing, timeout=5)).status == TurnStatus.FAILED
    found = points(reader)
    assert total(found, "june.turns.started") == 2  # the answered turn's second attempt is no start
    assert (
        total(found, "june.turns.parked"),
        total(found, "june.turns.completed"),
        total(found, "june.turns.failed"),
    ) == (1, 1, 1)
    assert total(found, "june.turns.running") == 0
    [started] = found["june.turns.started"]
    assert dict(started.attributes) == {"gen_ai.agent.name": "a", "june.turn.source": ""}
    assert sum(p.count for p in found["june.turn.duration"]) == 3
    assert sum(p.count for p in found["june.turn.queue_wait"]) == 2
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in found["gen_ai.client.token.usage"]}
    assert tokens == {"input": 40, "output": 6}
    steps = {p.attributes["june.step.kind"]: p.count for p in found["june.step.duration"]}
    assert steps == {"chat": 3, "execute_tool": 2}  # the tool ran again with the answer


async def test_model_calls_add_their_cost_at_the_agents_price():
    reader = InMemoryMetricReader()  # $3 / $15 per million tokens:
    obs = OtelObserver(TracerProvider(), MeterProvider(metric_readers=[reader]), model_of=lambda a: "claude-sonnet-4-6")
    agent = Agent("a", "instr")
    model = ScriptedModel(
        [reply("hi", usage={"input_tokens": 1_000_000, "output_tokens": 200_000, "cache_read_input_tokens": 1_000_000})]
    )
    rt, _, _ = make_runtime(agent, model)
    rt.observer = rt.executor.observer = obs
    s = rt.session("a", "cost")
    tid = await s.start("go")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    [cost] = points(reader)["june.cost"]
    assert abs(cost.value - (3.0 + 3.0 + 0.3)) < 1e-9  # input, output, cache reads at 0.1x
    assert dict(cost.attributes) == {
        "gen_ai.agent.name": "a",
        "june.turn.source": "",
        "gen_ai.request.model": "claude-sonnet-4-6",
    }


async def test_an_unpriced_model_adds_no_cost():
    reader = InMemoryMetricReader()
    obs = OtelObserver(TracerProvider(), MeterProvider(metric_readers=[reader]), model_of=lambda a: "other-model")
    rt, _, _ = make_runtime(Agent("a", "instr"), ScriptedModel([reply("hi", usage={"input_tokens": 5})]))
    rt.observer = rt.executor.observer = obs
    s = rt.session("a", "nocost")
    tid = await s.start("go")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    found = points(reader)
    assert "june.cost" not in found and total(found, "june.turns.completed") == 1
