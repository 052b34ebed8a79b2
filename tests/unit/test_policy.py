"""Per-source policies (instruction overlays, denied tools) and proactive turns."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agents_app.runtime import (
    Agent,
    AgentConfigError,
    ModelRequest,
    ScriptedModel,
    TurnInput,
    TurnStatus,
    reply,
    tool,
)

from ._support import logged, make_runtime

BASE, OVERLAY = "You are the ops agent.", "Requests come from a webhook; be terse."


def wipe_tool(ran: list[Any]) -> Any:
    @tool("wipe", "dangerous")
    def wipe(input: dict[str, Any], ctx: Any) -> Any:
        ran.append(ctx.call_id)
        return "wiped"

    return wipe


async def first_request(agent: Agent, input: TurnInput, script: Any = None) -> tuple[ModelRequest, Any]:
    model = ScriptedModel(script or [reply("ok")])
    rt, store, sink = make_runtime(agent, model)
    s = rt.session(agent.name, "s1")
    res = await s.result(await s.start(input), timeout=5)
    return model.requests[0], (res, store, s)


async def test_overlay_is_appended_to_the_instructions_for_its_source():
    agent = Agent("a", BASE, overlays={"webhook": OVERLAY}, surfaces={"webhook": {"mode": "append"}})
    request, _ = await first_request(agent, TurnInput("hi", source="webhook"))
    assert request.system == f"{BASE}\n\n{OVERLAY}"
    request, _ = await first_request(agent, TurnInput("hi", source="web"))
    assert request.system == BASE


async def test_overlay_with_mode_replace_is_the_whole_prompt():
    agent = Agent("a", BASE, overlays={"webhook": OVERLAY}, surfaces={"webhook": {"mode": "replace"}})
    request, _ = await first_request(agent, TurnInput("hi", source="webhook"))
    assert request.system == OVERLAY


def test_replace_without_an_overlay_is_a_config_error_naming_the_file():
    with pytest.raises(AgentConfigError, match=r"instructions\.webhook\.md"):
        Agent("a", BASE, surfaces={"webhook": {"mode": "replace"}})


def test_an_unknown_mode_is_a_config_error():
    with pytest.raises(AgentConfigError, match="sideways"):
        Agent("a", BASE, overlays={"webhook": OVERLAY}, surfaces={"webhook": {"mode": "sideways"}})


async def test_denied_tools_are_not_offered_for_that_source():
    ran: list[Any] = []
    agent = Agent("a", BASE, tools=[wipe_tool(ran)], surfaces={"webhook": {"deny_tools": ["wipe"]}})
    request, _ = await first_request(agent, TurnInput("hi", source="webhook"))
    assert [t.name for t in request.tools] == []
    request, _ = await first_request(agent, TurnInput("hi", source="web"))
    assert [t.name for t in request.tools] == ["wipe"]


async def test_a_denied_tool_called_anyway_is_an_unknown_tool():
    ran: list[Any] = []
    agent = Agent("a", BASE, tools=[wipe_tool(ran)], surfaces={"webhook": {"deny_tools": ["wipe"]}})
    _, (res, store, s) = await first_request(
        agent, TurnInput("hi", source="webhook"), [reply("", ("wipe", {})), reply("could not")]
    )
    assert res.status == TurnStatus.COMPLETED and ran == []
    [msg] = [m for m in store.transcript(s.ref) if m.role == "tool"]
    assert msg.result == {"error": "unknown tool: wipe"} and msg.is_error


def test_unused_surfaces_log_a_warning(caplog):
    agent = Agent(
        "a", BASE, overlays={"webhook": OVERLAY}, surfaces={"webhook": {"mode": "append"}, "web": {"mode": "append"}}
    )
    with caplog.at_level(logging.WARNING, logger="agents_app.runtime.agent"):
        assert agent.warn_unused_surfaces(["web", "http"]) == ["webhook"]
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "webhook" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agents_app.runtime.agent"):
        assert agent.warn_unused_surfaces(["web", "webhook"]) == []
    assert caplog.records == []


async def test_a_proactive_turn_opens_with_a_trigger_message():
    agent = Agent("a", BASE)
    request, (res, store, s) = await first_request(
        agent, TurnInput("Post the daily summary", kind="proactive", by="cron:daily", source="schedule")
    )
    assert res.status == TurnStatus.COMPLETED
    [opening] = request.messages
    assert (opening.role, opening.text, opening.by) == ("trigger", "Post the daily summary", "cron:daily")
    assert store.transcript(s.ref)[0] == opening
    [started] = await logged(store, s.ref, "turn.started")
    assert started.trigger == "proactive"


async def test_the_policy_is_kept_across_a_park_and_resume():
    @tool("deploy", "needs approval")
    async def deploy(input: dict[str, Any], ctx: Any) -> Any:
        return await ctx.request_input(id="approve", prompt="Deploy?", schema={"type": "boolean"})

    agent = Agent("a", BASE, tools=[deploy], overlays={"webhook": OVERLAY}, surfaces={"webhook": {"mode": "append"}})
    model = ScriptedModel([reply("", ("deploy", {})), reply("deployed")])
    rt, store, sink = make_runtime(agent, model)
    s = rt.session("a", "s1")
    tid = await s.start(TurnInput("ship it", source="webhook"))
    assert (await s.result(tid, timeout=5)).status == TurnStatus.SUSPENDED
    saved = agent.policy_for("webhook")
    [pending] = await s.pending()
    assert pending["policy"] == saved == (await store.get_turn(tid)).policy
    # the instructions change while the turn is parked: the resumed turn keeps its policy
    agent.overlays = {"webhook": "something else entirely"}
    await s.resume(tid, "approve", True)
    assert (await s.result(tid, timeout=5)).status == TurnStatus.COMPLETED
    assert [r.system for r in model.requests] == [f"{BASE}\n\n{OVERLAY}"] * 2
