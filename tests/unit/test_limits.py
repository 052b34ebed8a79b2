"""Per-turn limits (agents_app/runtime/limits.py): a model that keeps calling tools is not
killed at a limit — its last call gets no tools and a note, and the turn completes with that
answer, marked ``limited``. Pins the failure: nothing bounded a turn (1,687 model calls in 3
minutes against a peer that always answers with a tool call)."""

from __future__ import annotations

import pytest

from agents_app.runtime import Agent, ModelReply, ScriptedModel, SessionRef, StopReason, ToolCall, tool
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.limits import Limits, limits_config
from agents_app.runtime.model import ModelError

from ._support import make_runtime


@tool("probe", "Look something up.", {"type": "object", "properties": {}})
async def probe(input, ctx):
    return {"found": "more to look at"}


def runaway(request) -> ModelReply:
    """Calls ``probe`` whenever it may; told it may not, answers."""
    n = sum(1 for m in request.messages if m.role == "assistant")
    if request.tools_allowed:
        return ModelReply(
            text="",
            tool_calls=(ToolCall(id=f"p{n}", name="probe", input={}),),
            stop_reason=StopReason.TOOL_USE,
            usage={"input_tokens": 100, "output_tokens": 10},
        )
    return ModelReply(text="Best answer so far.", usage={"input_tokens": 100, "output_tokens": 10})


def events_of(sink, kind):
    return [e.event for _, e in sink.published if e.event.type == kind]


@pytest.mark.parametrize("calls", [1, 5])
async def test_a_looping_model_stops_at_its_call_limit_with_a_final_answer(calls):
    agent = Agent("a", "You loop.", tools=[probe], limits={"model_calls": calls})
    model = ScriptedModel(runaway)
    rt, store, sink = make_runtime(agent, model)
    result = await rt.session("a", "s1").turn("go")
    assert result.status == "completed" and result.text == "Best answer so far."
    assert model.calls == calls  # the limit counts the last call
    assert [r.tools_allowed for r in model.requests] == [True] * (calls - 1) + [False]
    last = model.requests[-1]
    assert last.tools, "the tools stay in the request: earlier calls refer to them"
    assert f"limit of {calls} model calls" in last.system
    [done] = events_of(sink, "turn.completed")
    assert done.limited == "model_calls"
    turn = await store.get_turn(result.turn_id)
    assert turn.usage["limited"] == "model_calls"


async def test_a_token_limit_ends_the_turn_the_same_way():
    agent = Agent("a", "You loop.", tools=[probe], limits={"model_calls": None, "tokens": 300})
    model = ScriptedModel(runaway)
    rt, _, sink = make_runtime(agent, model)
    result = await rt.session("a", "s1").turn("go")
    assert result.status == "completed"
    assert model.calls == 4  # 110 tokens a call: past 300 after three, the fourth is the last
    assert events_of(sink, "turn.completed")[0].limited == "tokens"


async def test_a_turn_within_its_limits_is_not_marked():
    agent = Agent("a", "You answer.", limits={"model_calls": 3})
    model = ScriptedModel([ModelReply(text="hi")])
    rt, _, sink = make_runtime(agent, model)
    result = await rt.session("a", "s1").turn("go")
    assert result.status == "completed" and model.requests[0].tools_allowed
    assert events_of(sink, "turn.completed")[0].limited is None


async def test_a_last_call_that_gives_no_answer_fails_the_turn_with_a_clear_reason():
    agent = Agent("a", "You loop.", tools=[probe], limits={"model_calls": 2})

    def mute(request):
        return runaway(request) if request.tools_allowed else ModelReply(text="", usage={})

    rt, _, sink = make_runtime(agent, ScriptedModel(mute))
    session = rt.session("a", "s1")
    turn_id = await session.start("go")
    assert (await session.result(turn_id)).status == "failed"
    [failed] = events_of(sink, "turn.failed")
    assert "limit of model calls" in failed.error and "no answer" in failed.error


def test_every_turn_is_bounded_by_default_and_declarations_are_checked():
    assert Agent("a").limits == Limits(model_calls=50, tokens=None)
    assert limits_config({"tokens": 1000}).model_calls == 50
    for bad in ({"model_call": 5}, {"tokens": 0}, {"model_calls": True}, {"tokens": 1.5}, ["x"]):
        with pytest.raises(AgentConfigError):
            limits_config(bad)


async def test_the_demo_models_loop_forever_ends_at_the_limit():
    from pathlib import Path

    import agents_app
    from agents_app.loader import load_agent
    from agents_app.providers.demo import DemoModel

    ops = load_agent(Path(agents_app.__file__).parent / "agents" / "ops")
    ops.limits = Limits(model_calls=6)
    model = DemoModel(delay=0)
    rt, _, sink = make_runtime(ops, model)
    result = await rt.session("ops", "s1").turn("loop forever")
    assert result.status == "completed"
    assert "stopped at this turn's limit after 5 stock lookups" in result.text
    assert events_of(sink, "turn.completed")[0].limited == "model_calls"


async def test_a_cancelled_or_failed_turn_keeps_what_it_spent():
    """Pins "0 input, 0 output" on the dashboard for a probe turn cancelled after 1,585 tool
    steps whose messages carried 15,880 input and 7,940 output tokens: only a completed turn
    recorded its usage."""
    import asyncio

    agent = Agent("a", "You loop.", tools=[probe], limits={"model_calls": None})
    model = ScriptedModel(runaway)
    rt, store, _ = make_runtime(agent, model)
    session = rt.session("a", "s1")
    turn_id = await session.start("go")
    while model.calls < 4:
        await asyncio.sleep(0.001)
    await session.cancel(turn_id)
    result = await session.result(turn_id)
    assert result.status == "cancelled"
    usage = (await store.get_turn(turn_id)).usage
    assert usage["input_tokens"] >= 300 and usage["output_tokens"] >= 30

    def fails(request):
        if any(m.role == "tool" for m in request.messages):
            raise ModelError("down", retryable=False)
        return runaway(request)

    rt, store, _ = make_runtime(agent, ScriptedModel(fails))
    session = rt.session("a", "s2")
    turn_id = await session.start("go")
    assert (await session.result(turn_id)).status == "failed"
    assert (await store.get_turn(turn_id)).usage == {"input_tokens": 100, "output_tokens": 10, "model_calls": 1}
