"""AG-UI's own client (npm ``@ag-ui/client``'s HttpAgent; tests/js) against a live June (daphne +
a worker): a turn with a tool call, and a tool approval that ends the run on an interrupt and is
answered by a resume run (through June's answer path)."""

from __future__ import annotations

import pytest

from agents_app.models import Order
from sessions_app import models as m
from tests.integration.live_site import live_site, node

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def site(django_db_setup, django_db_blocker, tmp_path_factory):
    # a slow demo stream, so a reload lands mid-run; the essay
    # faster than the demo's: the clients go after 3 deltas, the reload test waits for its end
    with live_site(tmp_path_factory.mktemp("agui"), JUNE_DEMO_DELAY="0.02", JUNE_DEMO_ESSAY_DELAY="0.05") as url:
        yield url


@pytest.fixture
def run(site, django_user_model):
    user = django_user_model.objects.create_user("alice", password="pw-alice-123")
    token = m.ApiToken.issue(user)[1]

    def go(thread: str, text: str, **args):
        return node("agui.mjs", {"base": site, "token": token, "agent": "ops", "thread": thread, "text": text, **args})

    return go


def test_a_turn_with_a_tool_call_is_one_run(run):
    seen = run("t-tool", "stock mugs")
    events = seen["first"]
    assert events[0] == "RUN_STARTED" and events[1] == "STATE_SNAPSHOT" and events[-1] == "RUN_FINISHED"
    assert events[2] == "CUSTOM"  # june.turn.queued: the run started its turn
    for kind in ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"):
        assert kind in events
    assert seen["firstOutcome"]["type"] == "success"
    turn = m.Turn.objects.get(session__key="t-tool")
    assert seen["state"]["june"]["turnId"] == turn.pk
    (call,) = [c for msg in seen["messages"] for c in (msg.get("toolCalls") or [])]
    assert call["function"]["name"] == "lookup_stock"
    assert any(msg["role"] == "tool" for msg in seen["messages"])
    assert seen["messages"][-1]["role"] == "assistant" and seen["messages"][-1]["content"] == turn.text


def test_a_tool_approval_is_an_interrupt_answered_by_a_resume_run(run):
    seen = run("t-approve", "bulk order 4 cups", approve=True)
    outcome = seen["firstOutcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["reason"] == "tool_approval" and interrupt["id"].startswith("approve:")
    assert interrupt["toolCallId"] and interrupt["metadata"]["mayAnswer"] is True
    assert "TOOL_CALL_RESULT" in seen["second"] and seen["secondOutcome"]["type"] == "success"
    assert list(Order.objects.values_list("item", "quantity")) == [("cups", 4)]
    assert m.Answer.objects.get().answer == {"decision": "approve"}
    # the reply after the tool is a message of its own, after the tool's result: the resume run
    # numbered its messages from 1 again, reused the first run's id, and the client appended the
    # answer to "Calling bulk_order." (before the result)
    assert [msg["role"] for msg in seen["messages"]] == ["user", "assistant", "tool", "assistant"], seen["messages"]
    assert seen["messages"][-1]["content"] == m.Turn.objects.get(session__key="t-approve").text


def test_a_client_reloaded_mid_run_reattaches_and_gets_the_whole_turn(run):
    seen = run("t-reload", "essay", reattach=True)
    assert seen["deltasBeforeReload"] >= 3
    assert seen["events"][0] == "RUN_STARTED" and seen["outcome"]["type"] == "success"
    assert "CUSTOM" not in seen["events"]  # a reattach queued nothing
    turn = m.Turn.objects.get(session__key="t-reload")
    assert turn.status == "completed" and seen["text"] == turn.text
