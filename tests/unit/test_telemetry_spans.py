"""Traces on the fakes: the span tree and GenAI attributes an in-memory exporter receives for a
turn with a sync and an async tool, a parked turn answered later (linked), and a parent with
two children (one trace). The observer is the real OpenTelemetry one, on a provider of its own."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents_app.runtime import Agent, ScriptedModel, TurnStatus, reply, tool
from sessions_app.telemetry.otel import OtelObserver

from ._subagents import build
from ._support import make_runtime


@pytest.fixture
def traced() -> tuple[OtelObserver, InMemorySpanExporter, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelObserver(provider), exporter, provider.get_tracer("test")


def observe(rt: Any, obs: OtelObserver) -> None:
    rt.observer = obs
    rt.executor.observer = obs


def by_op(spans: list[Any], op: str) -> list[Any]:
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == op]


async def test_a_turn_with_a_sync_and_an_async_tool_is_one_tree_under_the_request(traced):
    obs, exporter, tracer = traced

    @tool("add", "adds one")
    def add(input: dict[str, Any], ctx: Any) -> Any:
        return {"n": 2}

    @tool("fetch", "fetches")
    async def fetch(input: dict[str, Any], ctx: Any) -> Any:
        return {"page": "ok"}

    agent = Agent("a", "instr", tools=[add, fetch], model="m-1")
    model = ScriptedModel(
        [
            reply("working", ("add", {}), ("fetch", {}), usage={"input_tokens": 11, "output_tokens": 3}),
            reply("done", usage={"input_tokens": 20, "output_tokens": 1}),
        ]
    )
    rt, store, _ = make_runtime(agent, model)
    observe(rt, obs)
    s = rt.session("a", "s1")
    with tracer.start_as_current_span("POST /turns") as request:
        tid = await s.start("secret words")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    spans = exporter.get_finished_spans()
    [turn] = by_op(spans, "invoke_agent")
    chats, tools = by_op(spans, "chat"), by_op(spans, "execute_tool")
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in spans} == {trace_id}
    assert turn.parent.span_id == request.get_span_context().span_id
    assert turn.name == "invoke_agent a" and turn.attributes["gen_ai.agent.name"] == "a"
    assert turn.attributes["gen_ai.conversation.id"] == "a/s1" and turn.attributes["june.turn.id"] == tid
    assert turn.attributes["june.turn.status"] == "completed"
    assert [c.parent.span_id for c in chats + tools] == [turn.context.span_id] * 4
    assert [
        (
            c.attributes["gen_ai.request.model"],
            c.attributes["gen_ai.usage.input_tokens"],
            c.attributes["gen_ai.usage.output_tokens"],
        )
        for c in chats
    ] == [("m-1", 11, 3), ("m-1", 20, 1)]
    assert [(t.name, t.attributes["gen_ai.tool.name"], t.attributes["gen_ai.tool.call.id"]) for t in tools] == [
        ("execute_tool add", "add", "c0"),
        ("execute_tool fetch", "fetch", "c1"),
    ]
    # message content is not recorded
    assert not any("secret" in str(v) for sp in spans for v in sp.attributes.values())


async def test_a_parked_turn_answered_later_is_a_new_span_linked_to_its_trace(traced):
    obs, exporter, tracer = traced

    @tool("deploy", "asks first")
    async def deploy(input: dict[str, Any], ctx: Any) -> Any:
        return {"ok": await ctx.request_input(id="approve", prompt="Deploy?", schema={"type": "boolean"})}

    agent = Agent("a", "instr", tools=[deploy])
    rt, store, _ = make_runtime(agent, ScriptedModel([reply("", ("deploy", {})), reply("deployed")]))
    observe(rt, obs)
    s = rt.session("a", "s1")
    with obs.request("turn_start http", {"june.turn.source": "http", "bad": object()}) as request:
        tid = await s.start("go")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.SUSPENDED
    await s.resume(tid, "approve", True)
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    spans = exporter.get_finished_spans()
    [req_span] = [sp for sp in spans if sp.name == "turn_start http"]
    assert dict(req_span.attributes) == {"june.turn.source": "http"}  # only plain values
    first, later = by_op(spans, "invoke_agent")
    req = request.get_span_context()
    assert first.context.trace_id == req.trace_id and first.attributes["june.turn.status"] == "suspended"
    assert later.parent is None and later.context.trace_id != req.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in later.links] == [(req.trace_id, req.span_id)]
    assert later.attributes["june.turn.resumed"] is True and later.attributes["june.turn.status"] == "completed"


async def test_a_parent_with_two_children_is_one_trace(traced):
    obs, exporter, tracer = traced
    rt, store, _, _ = build()
    observe(rt, obs)
    s = rt.session("boss", "b1")
    with tracer.start_as_current_span("POST /turns") as request:
        tid = await s.start("all tides and winds")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    spans = exporter.get_finished_spans()
    turns = by_op(spans, "invoke_agent")
    kids = [t for t in turns if t.attributes["gen_ai.agent.name"] == "researcher"]
    boss = [t for t in turns if t.attributes["gen_ai.agent.name"] == "boss"]
    assert len(kids) == 2 and len(boss) == 2  # parked on its children, then woken
    spawning = [t for t in by_op(spans, "execute_tool") if t.parent.span_id == boss[0].context.span_id]
    assert [t.attributes["gen_ai.tool.name"] for t in spawning] == ["delegate"]
    # the children run under the tool call that spawned them, in the request's trace
    assert {k.parent.span_id for k in kids} == {spawning[0].context.span_id}
    assert {k.context.trace_id for k in kids} == {request.get_span_context().trace_id}
    assert boss[1].links and boss[1].links[0].context.trace_id == request.get_span_context().trace_id


async def test_without_an_observer_nothing_is_traced(traced):
    _, exporter, _ = traced
    agent = Agent("a", "instr")
    rt, store, _ = make_runtime(agent, ScriptedModel([reply("hi")]))
    assert rt.observer is None and rt.executor.observer is None
    s = rt.session("a", "s1")
    tid = await s.start("hello")
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    assert (await store.get_turn(tid)).input.trace is None and exporter.get_finished_spans() == ()
