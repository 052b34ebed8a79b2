"""Declared approval of a tool call (agents_app/runtime/approval.py): the ops demo's
``bulk_order`` (a ``def`` tool declared with ``approval=``) parks before it runs; a person
approves, edits or rejects it; an approved call runs once with the approved input, a rejected
one never runs, an edit the tool's schema refuses is a 422 that applies nothing."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from agents_app.models import Order
from agents_app.runtime import LocalDispatcher, TurnInput, TurnStatus
from sessions_app import models as m
from sessions_app import wiring

from .test_api import Api, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


async def _start(user, key: str, text: str):
    rt = wiring.runtime(dispatcher=LocalDispatcher())
    s = rt.session("ops", key)
    rec = await s.start_turn(
        TurnInput(text, source="web", user={"id": str(user.pk), "attested": True}), created_by=user
    )
    await rt.dispatcher.idle()
    return rt, s, rec.turn_id


def parked(user, key: str, text: str = "bulk order 50 mugs"):
    rt, s, turn_id = async_to_sync(_start)(user, key, text)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.SUSPENDED, turn.status
    request = turn.pending["request"]
    return rt, s, turn_id, request


def answer(rt, s, turn_id: str, request: dict, value, user) -> None:
    async def go():
        await s.resume(turn_id, request["id"], value, by=str(user.pk), via="api")
        await rt.dispatcher.idle()

    async_to_sync(go)()


def test_the_card_shows_the_tool_and_its_input_and_nothing_runs_before_an_answer(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    _, _, turn_id, request = parked(alice, "b1")
    assert request["kind"] == "tool_approval" and request["tool"] == "bulk_order"
    assert request["input"] == {"item": "mugs", "quantity": 50}
    assert request["answerers"] == {"user": str(alice.pk)} and request["prompt"] == "Place this bulk order?"
    assert not Order.objects.exists()


def test_approve_runs_the_call_once_with_the_models_input(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "b2")
    answer(rt, s, turn_id, request, {"decision": "approve"}, alice)
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.COMPLETED
    assert list(Order.objects.values_list("item", "quantity")) == [("mugs", 50)]


def test_edit_runs_the_call_with_the_persons_input(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "b3")
    answer(rt, s, turn_id, request, {"decision": "edit", "input": {"item": "mugs", "quantity": 20}}, alice)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.COMPLETED
    assert list(Order.objects.values_list("quantity", flat=True)) == [20]
    assert "20" in turn.text
    saved = m.Answer.objects.get(turn_id=turn_id)
    assert saved.answer == {"decision": "edit", "input": {"item": "mugs", "quantity": 20}}  # who edited what


def test_reject_never_runs_the_call_and_the_model_reads_why(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "b4")
    answer(rt, s, turn_id, request, {"decision": "reject", "message": "fifty is too many"}, alice)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.COMPLETED and not Order.objects.exists()
    assert "rejected by a person: fifty is too many" in turn.text


@pytest.mark.parametrize(
    "bad",
    [
        {"decision": "edit", "input": {"item": "mugs", "quantity": "lots"}},  # the tool's schema refuses it
        {"decision": "edit"},  # an edit without its input
        {"decision": "maybe"},
        {"decision": "approve", "extra": 1},
        True,
        {"decision": "edit", "input": {"a": {"b": {"c": {"d": {"e": {"f": [[[[[[1]]]]]]}}}}}}},
    ],
)
def test_an_answer_the_schema_refuses_is_a_422_and_applies_nothing(monkeypatch, bad, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    _, _, turn_id, request = parked(alice, "b5")
    status, body, _ = Api(token_for(alice)).post(
        f"/api/agents/ops/sessions/b5/turns/{turn_id}/resume", {"input_id": request["id"], "answer": bad}
    )
    assert status == 422, (status, body)
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.SUSPENDED and not Order.objects.exists()


def test_answering_twice_or_after_the_turn_ended_is_a_409_and_runs_nothing(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "b6")
    api = Api(token_for(alice))
    path = f"/api/agents/ops/sessions/b6/turns/{turn_id}/resume"
    first = api.post(path, {"input_id": request["id"], "answer": {"decision": "reject", "message": "no"}})
    assert first[0] in (200, 202), first
    again = api.post(path, {"input_id": request["id"], "answer": {"decision": "approve"}})
    assert again[0] == 409, again
    async_to_sync(rt.dispatcher.idle)()
    assert not Order.objects.exists()


def test_another_user_cannot_answer(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice, bob = make_user("alice"), make_user("bob")
    _, _, turn_id, request = parked(alice, "b7")
    status, _, _ = Api(token_for(bob)).post(
        f"/api/agents/ops/sessions/b7/turns/{turn_id}/resume",
        {"input_id": request["id"], "answer": {"decision": "approve"}},
    )
    assert status in (403, 404)
    assert not Order.objects.exists()


def test_a_declaration_is_checked_when_the_tool_is_made():
    from agents_app.runtime import tool
    from agents_app.runtime.errors import ToolDeclarationError

    with pytest.raises(ToolDeclarationError):
        tool("t", "t", approval={"who": "me"})(lambda i, c: None)
    with pytest.raises(ToolDeclarationError):
        tool("t", "t", approval={"answerers": {"anyone": True}})(lambda i, c: None)
    assert tool("t", "t", approval=True)(lambda i, c: None).approval == {}


def test_an_operator_edits_the_call_in_the_admin_inbox(monkeypatch, client, settings):
    """The inbox's form for a tool approval: a decision, the input (prefilled, editable), a note."""
    settings.JUNE_DEMO_DELAY = 0.0
    from django.contrib.auth import get_user_model

    alice = make_user("alice")
    _, _, turn_id, request = parked(alice, "b8", "bulk order 40 tea")
    # an operator may answer where the agent's authorize_answer grants it; here alice's own
    # request names her, so she answers (staff, to reach the admin)
    get_user_model().objects.filter(pk=alice.pk).update(is_staff=True, is_superuser=True)
    client.force_login(get_user_model().objects.get(pk=alice.pk))
    url = f"/admin/sessions_app/approvalrequest/{turn_id}/change/"
    page = client.get(url)
    assert page.status_code == 200 and "Input of bulk_order" in page.content.decode()
    assert "&quot;quantity&quot;: 40" in page.content.decode() or '"quantity": 40' in page.content.decode()
    done = client.post(
        url,
        {"input_id": request["id"], "decision": "edit", "tool_input": '{"item": "tea", "quantity": 4}', "message": ""},
    )
    assert done.status_code in (200, 302)
    saved = m.Answer.objects.get(turn_id=turn_id)
    assert saved.answer == {"decision": "edit", "input": {"item": "tea", "quantity": 4}}
    assert saved.user_id == alice.pk and saved.via == "admin"


def test_the_turn_page_shows_an_edit_before_and_after_and_who_made_it(monkeypatch, client, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    from django.contrib.auth import get_user_model

    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "b9", "bulk order 50 mugs")
    answer(rt, s, turn_id, request, {"decision": "edit", "input": {"item": "mugs", "quantity": 5}}, alice)
    staff = get_user_model().objects.create_user("boss", password="pw", is_staff=True, is_superuser=True)
    client.force_login(staff)
    page = client.get(f"/admin/sessions_app/turn/{turn_id}/change/").content.decode()
    assert (
        "edited: {&quot;item&quot;: &quot;mugs&quot;, &quot;quantity&quot;: 50} → "
        "{&quot;item&quot;: &quot;mugs&quot;, &quot;quantity&quot;: 5}" in page
    )
    assert f"<td>{alice.pk}</td>" in page  # who answered (by id: this answer came through the host API)


def test_the_timeline_marks_the_question_answered_and_names_the_end_once(monkeypatch, settings):
    """Issue 40: "asked for an answer — waiting" still read waiting after the answer, and the
    end row read "completed completed"."""
    settings.JUNE_DEMO_DELAY = 0.0
    from sessions_app.admin import timeline

    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "b10")
    [question] = [r for r in timeline.timeline(m.Turn.objects.get(pk=turn_id)) if r["kind"] == "input"]
    assert question["state"] == "waiting"
    answer(rt, s, turn_id, request, {"decision": "approve"}, alice)
    rows = timeline.timeline(m.Turn.objects.get(pk=turn_id))
    [question] = [r for r in rows if r["kind"] == "input"]
    assert question["state"] == "answered"
    assert rows[-1]["kind"] == "end" and rows[-1]["name"] == "completed" and "state" not in rows[-1]
