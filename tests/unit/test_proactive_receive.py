"""receive(): proactive turns rendered through a channel's deliver(); never dropped silently."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agents_app.runtime import Agent, ScriptedModel, TurnStatus, reply, tool
from agents_app.runtime.errors import TurnConflictError
from agents_app.runtime.proactive import ChannelError, DeliveryError, receive

from ._support import logged, make_runtime

TRIGGER = {"kind": "proactive", "by": "cron:daily"}


class Inbox:
    source = "schedule"

    def __init__(self) -> None:
        self.delivered: list[tuple[dict[str, Any], Any]] = []

    async def deliver(self, target: dict[str, Any], result: Any) -> None:
        self.delivered.append((target, result))


class Broken(Inbox):
    async def deliver(self, target: dict[str, Any], result: Any) -> None:
        raise ConnectionError("inbox is down")


class NoDeliver:
    source = "schedule"


def setup(script: list[Any] | None = None, **agent_kw: Any):
    model = ScriptedModel(script or [reply("Daily summary: fine.")])
    rt, store, sink = make_runtime(Agent("ops", "You are ops.", **agent_kw), model)
    return rt.session("ops", "inbox"), store, model


async def test_the_seed_is_a_trigger_message_attributed_to_by_and_the_result_is_delivered():
    s, store, model = setup()
    inbox = Inbox()
    result = await receive(
        inbox, seed="summary of today", target={"session": "inbox"}, trigger=TRIGGER, session=s, timeout=5
    )
    assert result.status == TurnStatus.COMPLETED and result.text == "Daily summary: fine."
    assert inbox.delivered == [({"session": "inbox"}, result)]
    opening = store.transcript(s.ref)[0]
    assert (opening.role, opening.text, opening.by) == ("trigger", "summary of today", "cron:daily")
    assert not any(m.role == "user" for m in store.transcript(s.ref))  # no human sent anything
    rec = await store.get_turn(result.turn_id)
    assert (rec.input.kind, rec.input.by, rec.input.source, rec.input.user) == (
        "proactive",
        "cron:daily",
        "schedule",
        None,
    )
    [started] = await logged(store, s.ref, "turn.started")
    assert started.trigger == "proactive"
    # the provider sees the trigger as the opening message of the request
    assert [m.role for m in model.requests[0].messages] == ["trigger"]


async def test_a_channel_without_deliver_raises_before_any_turn_starts():
    s, store, _ = setup()
    with pytest.raises(ChannelError, match="no deliver"):
        await receive(NoDeliver(), seed="summary", target={}, trigger=TRIGGER, session=s)
    assert store.transcript(s.ref) == [] and await store.events(s.ref) == []


async def test_a_failed_delivery_raises_with_the_committed_result():
    s, store, _ = setup()
    with pytest.raises(DeliveryError, match="inbox is down") as info:
        await receive(Broken(), seed="summary", target={}, trigger=TRIGGER, session=s, timeout=5)
    assert info.value.result.status == TurnStatus.COMPLETED  # the turn is not lost, only undelivered
    assert (await store.get_turn(info.value.result.turn_id)).status == TurnStatus.COMPLETED


async def test_a_target_the_channel_rejects_raises_before_the_turn_starts():
    class Picky(Inbox):
        def check_target(self, target: Any) -> None:
            if not (target or {}).get("session"):
                raise ChannelError("no session to deliver to")

    s, store, _ = setup()
    with pytest.raises(ChannelError, match="no session"):
        await receive(Picky(), seed="summary", target={}, trigger=TRIGGER, session=s)
    assert store.transcript(s.ref) == []


@pytest.mark.parametrize(
    "trigger", [None, {"kind": "inbound", "by": "x"}, {"kind": "proactive"}, {"kind": "proactive", "by": "  "}]
)
async def test_a_trigger_must_be_proactive_and_name_who_started_it(trigger):
    s, store, _ = setup()
    with pytest.raises(ChannelError):
        await receive(Inbox(), seed="summary", target={}, trigger=trigger, session=s)
    assert store.transcript(s.ref) == []


async def test_an_empty_seed_is_refused():
    s, _, _ = setup()
    with pytest.raises(ChannelError, match="seed"):
        await receive(Inbox(), seed=" ", target={}, trigger=TRIGGER, session=s)


async def test_a_given_turn_id_starts_at_most_one_turn():
    s, store, _ = setup([reply("one"), reply("two")])
    inbox = Inbox()
    first = await receive(inbox, seed="summary", target={}, trigger=TRIGGER, session=s, turn_id="tick-1", timeout=5)
    with pytest.raises(TurnConflictError):
        await receive(inbox, seed="summary", target={}, trigger=TRIGGER, session=s, turn_id="tick-1", timeout=5)
    assert first.turn_id == "tick-1" and len(inbox.delivered) == 1
    assert [m.role for m in store.transcript(s.ref)] == ["trigger", "assistant"]


async def test_a_parked_proactive_turn_is_delivered_as_suspended():
    @tool("deploy", "needs approval")
    async def deploy(input: dict[str, Any], ctx: Any) -> Any:
        return await ctx.request_input(id="ok", prompt="Deploy?", schema={"type": "boolean"})

    s, _, _ = setup([reply("", ("deploy", {})), reply("done")], tools=[deploy])
    inbox = Inbox()
    result = await receive(inbox, seed="deploy nightly", target={}, trigger=TRIGGER, session=s, timeout=5)
    # no inbound speaker: the request is unrestricted; the channel renders the approval
    assert result.status == TurnStatus.SUSPENDED and result.request["id"] == "ok"
    assert inbox.delivered[0][1] is result


async def test_the_channel_source_selects_the_policy():
    @tool("wipe", "dangerous")
    def wipe(input: dict[str, Any], ctx: Any) -> Any:
        return "wiped"

    s, store, model = setup(
        [reply("", ("wipe", {})), reply("could not")],
        tools=[wipe],
        overlays={"schedule": "Runs unattended."},
        surfaces={"schedule": {"deny_tools": ["wipe"]}},
    )
    result = await receive(Inbox(), seed="clean up", target={}, trigger=TRIGGER, session=s, timeout=5)
    assert result.status == TurnStatus.COMPLETED
    assert model.requests[0].system == "You are ops.\n\nRuns unattended." and model.requests[0].tools == ()
    [tool_msg] = [m for m in store.transcript(s.ref) if m.role == "tool"]
    assert tool_msg.result == {"error": "unknown tool: wipe"} and tool_msg.is_error


def test_policy_assembly_warns_once_per_unmounted_source(caplog):
    agent = Agent("ops", "base", overlays={"slack": "be brief"}, surfaces={"slack": {}, "webhook": {}})
    with caplog.at_level(logging.WARNING, logger="agents_app.runtime.agent"):
        unused = agent.warn_unused_surfaces(["web", "http", "webhook", "schedule", "cli"])
    assert unused == ["slack"]
    assert [r.getMessage() for r in caplog.records] == [
        "agent ops: surface policy for source 'slack', which no mounted channel emits"
    ]
