"""The AI SDK's own client (npm ``ai``: DefaultChatTransport, readUIMessageStream; tests/js) against
a live June (daphne + a worker): a tool call, an approval answered from the client (and refused
once answered), a question only an operator may answer (waiting; 403 from the chat), a stop, a
reload that resumes mid-turn from the event log, a regenerate (a branch), and the history."""

from __future__ import annotations

import pytest

from agents_app.models import Attachment, Order
from sessions_app import models as m
from tests.fault.qcluster import wait_for
from tests.integration.live_site import live_site, node

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def site(django_db_setup, django_db_blocker, tmp_path_factory):
    # a slow demo stream, so a stop and a reload land mid-turn; the essay
    # faster than the demo's: the clients go after 3 deltas, the reload test waits for its end
    with live_site(tmp_path_factory.mktemp("uichat"), JUNE_DEMO_DELAY="0.02", JUNE_DEMO_ESSAY_DELAY="0.05") as url:
        yield url


@pytest.fixture
def chat(site, django_user_model):
    user = django_user_model.objects.create_user("alice", password="pw-alice-123")
    token = m.ApiToken.issue(user)[1]

    def run(scenario: str, key: str, **args):
        return node(
            "uichat.mjs", {"base": site, "token": token, "agent": "ops", "chat": key, "scenario": scenario, **args}
        )

    return run


def _tools(message: dict) -> list[dict]:
    return [p for p in message["parts"] if p["type"] == "dynamic-tool"]


def _text(message: dict) -> str:
    """The reply's last text part: what the turn answered (``Turn.text``)."""
    return [p["text"] for p in message["parts"] if p["type"] == "text"][-1]


def test_a_tool_call_streams_as_ui_chunks_and_the_history_matches(chat):
    seen = chat("tool", "c-tool", text="stock mugs")
    types = seen["types"]
    assert types[0] == "start" and types[1] == "data-june-turn" and types[-1] == "finish"  # queued, at once
    assert not [p for p in seen["message"]["parts"] if p["type"] == "data-june-turn"]  # transient
    for kind in ("tool-input-start", "tool-input-delta", "tool-input-available", "tool-output-available", "text-delta"):
        assert kind in types
    (tool,) = _tools(seen["message"])
    assert tool["toolName"] == "lookup_stock" and tool["state"] == "output-available"
    assert tool["input"] == {"item": "mugs"}
    turn = m.Turn.objects.get(session__key="c-tool")
    assert seen["message"]["id"] == turn.pk and _text(seen["message"]) == turn.text
    user, reply = seen["history"]
    assert user["role"] == "user" and user["parts"][0]["text"] == "stock mugs"
    assert reply["id"] == turn.pk and _tools(reply)[0]["state"] == "output-available"
    assert _text(reply) == turn.text


#: the smallest PNG (1x1), as a data: URL
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def test_a_file_part_reaches_the_model_as_an_attachment(chat):
    seen = chat("file", "c-file", text="what is this?", dataUrl=PNG)
    assert seen["types"][-1] == "finish"
    assert "I received 1 attachment" in _text(seen["message"])
    turn = m.Turn.objects.get(session__key="c-file")
    (row,) = Attachment.objects.filter(turn_id=turn.pk)
    assert row.content_type == "image/png" and row.name == "dot.png"
    (file_part,) = [p for p in seen["history"][0]["parts"] if p["type"] == "file"]
    assert file_part["mediaType"] == "image/png" and file_part["url"].endswith(f"/attachments/{row.pk}")


def test_an_approval_answered_from_the_client_runs_the_call_once(chat):
    seen = chat("approval", "c-approve", text="bulk order 5 mugs", approve=True)
    assert seen["first"][-2:] == ["tool-approval-request", "finish"]
    (asked,) = _tools(seen["asked"])
    assert asked["state"] == "approval-requested" and asked["approval"]["id"].startswith("approve:")
    # reloaded while parked: the history and the resume request show the same open approval
    (stored,) = _tools(seen["parkedHistory"][-1])
    assert stored["state"] == "approval-requested" and stored["approval"]["id"] == asked["approval"]["id"]
    assert seen["replay"][-2:] == ["tool-approval-request", "finish"]
    assert _tools(seen["replayMessage"])[0]["approval"]["id"] == asked["approval"]["id"]
    (done,) = _tools(seen["message"])
    assert done["state"] == "output-available"
    assert "tool-output-available" in seen["second"] and seen["second"][-1] == "finish"
    assert seen["again"].startswith("409 ")  # the same answer sent again: it was answered
    assert list(Order.objects.values_list("item", "quantity")) == [("mugs", 5)]
    answer = m.Answer.objects.get()
    assert answer.answer == {"decision": "approve"} and answer.via == "api"


def test_a_denial_from_the_client_never_runs_the_call(chat):
    seen = chat("approval", "c-deny", text="bulk order 9 pears", approve=False, reason="no pears")
    (done,) = _tools(seen["message"])
    assert done["state"] in ("output-available", "output-error")
    assert not Order.objects.exists()
    assert "no pears" in m.Turn.objects.get(session__key="c-deny").text


def test_an_operators_question_shows_as_waiting_and_the_chat_may_not_answer_it(chat):
    seen = chat("waiting", "c-wait", text="refund order 7 $12")
    assert seen["types"][-1] == "finish"
    waiting = [p for p in seen["message"]["parts"] if p["type"] == "data-june-input"]
    assert waiting and waiting[0]["data"]["mayAnswer"] is False
    turn = m.Turn.objects.get(session__key="c-wait")
    assert turn.status == "suspended"
    input_id = waiting[0]["data"]["id"]
    refused = chat("waiting", "c-wait2", text="refund order 8 $3", inputId=input_id)
    assert refused["answer"].startswith("403 "), refused["answer"]
    # stop does not throw the question away: every cancel's rule (answer it, or reset)
    assert refused["cancel"] == 409 and m.Turn.objects.get(session__key="c-wait2").status == "suspended"


def test_stop_cancels_the_turn(chat):
    seen = chat("cancel", "c-stop", text="essay")
    assert seen["cancelStatus"] == 200 and seen["turn"]["status"] in ("cancelled", "running")
    wait_for(lambda: m.Turn.objects.get(session__key="c-stop").status == "cancelled", what="the cancel")
    assert seen["resumeAfter"] is None  # nothing left to resume: 204


def test_a_reload_mid_turn_resumes_from_the_log_and_loses_nothing(chat):
    seen = chat("reload", "c-reload", text="essay")
    assert "finish" not in seen["dropped"] and seen["droppedText"]
    assert seen["resumed"][0] == "start" and seen["resumed"][-1] == "finish"
    assert "data-june-turn" not in seen["resumed"]  # a resume queued nothing
    turn = m.Turn.objects.get(session__key="c-reload")
    assert turn.status == "completed"
    assert _text(seen["message"]) == turn.text and turn.text.startswith(seen["droppedText"])
    assert seen["message"]["id"] == turn.pk


def test_regenerate_is_a_new_branch(chat):
    seen = chat("regenerate", "c-regen", text="hello there")
    assert seen["second"]["id"] != seen["first"]["id"] and seen["types"][-1] == "finish"
    session = m.Session.objects.get(key="c-regen")
    assert session.generation > 0
    history = seen["history"]
    assert [msg["role"] for msg in history] == ["user", "assistant"]
    assert history[1]["id"] == seen["second"]["id"]
