"""Parallel tool calls of one model step that each need approval (issue 38 item 2): all are
asked at once, answered in any order over the approvals API, the chat's resume and the admin
inbox, each answer reaching its own call; the turn stays parked until the last answer, then
runs the approved and edited calls once each and never the rejected one. LangGraph shipped
resume values to the wrong tool (#6533); mastra re-ran a denied tool (#24796)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from agents_app.models import Order
from agents_app.runtime import TurnStatus
from agents_app.runtime.errors import TurnConflictError, TurnNotResumable
from sessions_app import models as m

from .test_api import Api, inline_worker, make_user, token_for  # noqa: F401 (a fixture)
from .test_tool_approval import answer

pytestmark = pytest.mark.django_db(transaction=True)

THREE = "bulk order 50 mugs and 20 pens and 10 cups"


def _parked(user, key: str):
    from .test_tool_approval import _start

    rt, s, turn_id = async_to_sync(_start)(user, key, THREE)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.SUSPENDED, turn.status
    return rt, s, turn_id, {r["input"]["item"]: r for r in turn.pending["requests"]}


def _orders() -> list[tuple[str, int]]:
    return sorted(Order.objects.values_list("item", "quantity"))


def test_three_calls_are_asked_at_once_and_nothing_runs_before_the_last_answer(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, asked = _parked(alice, "p1")
    assert sorted(asked) == ["cups", "mugs", "pens"]
    assert len({r["id"] for r in asked.values()}) == 3
    assert all(r["kind"] == "tool_approval" and r["tool"] == "bulk_order" for r in asked.values())
    shown = m.Event.objects.filter(turn_id=turn_id, type="input.requested").count()
    assert shown == 3  # the chat draws a card per event: all three at once

    # out of order: the last call first (an edit), then the first (a reject)
    answer(rt, s, turn_id, asked["cups"], {"decision": "edit", "input": {"item": "cups", "quantity": 4}}, alice)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.SUSPENDED and [r["id"] for r in turn.pending["requests"]] == [
        asked["mugs"]["id"],
        asked["pens"]["id"],
    ]
    answer(rt, s, turn_id, asked["mugs"], {"decision": "reject", "message": "too many mugs"}, alice)
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.SUSPENDED
    assert not Order.objects.exists()  # nothing runs while one call still waits

    answer(rt, s, turn_id, asked["pens"], {"decision": "approve"}, alice)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.COMPLETED, (turn.status, turn.error)
    assert _orders() == [("cups", 4), ("pens", 20)]  # each answer reached its own call
    assert "too many mugs" in turn.text and "rejected" in turn.text
    assert m.Answer.objects.filter(turn_id=turn_id).count() == 3


def test_answering_one_call_twice_or_after_a_reset_is_a_409_and_runs_nothing(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, asked = _parked(alice, "p2")
    answer(rt, s, turn_id, asked["mugs"], {"decision": "reject", "message": "no"}, alice)
    with pytest.raises(TurnConflictError):  # already rejected: it is no longer asked
        answer(rt, s, turn_id, asked["mugs"], {"decision": "approve"}, alice)
    api = Api(token_for(alice))
    status, body, _ = api.post("/api/agents/ops/sessions/p2/reset")
    assert status in (200, 202), body
    with pytest.raises(TurnNotResumable):
        answer(rt, s, turn_id, asked["pens"], {"decision": "approve"}, alice)
    async_to_sync(rt.dispatcher.idle)()
    assert not Order.objects.exists()
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.CANCELLED


def test_the_approvals_api_lists_each_call_and_answers_them_in_any_order(inline_worker, monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    _, _, turn_id, asked = _parked(alice, "p3")
    api = Api(token_for(alice))
    status, body, _ = api.get("/api/approvals/")
    assert status == 200
    listed = [a for a in body["approvals"] if a["turn_id"] == turn_id]
    assert sorted(a["call"]["input"]["item"] for a in listed) == ["cups", "mugs", "pens"]
    assert all(a["request"]["id"] == asked[a["call"]["input"]["item"]]["id"] for a in listed)
    status, body, _ = api.get(f"/api/agents/ops/sessions/p3/turns/{turn_id}")
    assert status == 200 and len(body["pending_requests"]) == 3 and body["pending"] == body["pending_requests"][0]
    status, body, _ = api.get("/api/agents/ops/sessions/p3/pending")
    assert status == 200 and len(body["pending"]) == 3 and all(p["may_answer"] for p in body["pending"])

    url = f"/api/approvals/{turn_id}/answer"
    status, body, _ = api.post(
        url,
        {"input_id": asked["pens"]["id"], "answer": {"decision": "edit", "input": {"item": "pens", "quantity": -1}}},
    )
    assert status == 422, body  # the tool's own schema: nothing applied
    status, body, _ = api.post(url, {"input_id": asked["pens"]["id"], "answer": {"decision": "approve"}})
    assert status == 200 and body["status"] == "suspended", body
    status, body, _ = api.post(url, {"input_id": asked["pens"]["id"], "answer": {"decision": "approve"}})
    assert status == 409, body  # answered already
    status, body, _ = api.post(
        url, {"input_id": asked["mugs"]["id"], "answer": {"decision": "edit", "input": {"item": "mugs", "quantity": 5}}}
    )
    assert status == 200 and body["status"] == "suspended", body
    assert not Order.objects.exists()
    status, body, _ = api.post(url, {"input_id": asked["cups"]["id"], "answer": {"decision": "reject"}})
    assert status == 200, body
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.COMPLETED, (turn.status, turn.error)
    assert _orders() == [("mugs", 5), ("pens", 20)]
    status, body, _ = api.post(url, {"input_id": asked["cups"]["id"], "answer": {"decision": "approve"}})
    assert status == 409, body  # the turn completed: a rejected call never runs
    assert _orders() == [("mugs", 5), ("pens", 20)]


def test_the_admin_inbox_answers_the_call_it_is_asked_about(inline_worker, monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    alice.is_staff = True
    alice.save()
    _, _, turn_id, asked = _parked(alice, "p4")
    web = Client()
    web.force_login(alice)
    page = f"/admin/sessions_app/approvalrequest/{turn_id}/change/"
    shown = web.get(page, {"input": asked["cups"]["id"]})
    assert shown.status_code == 200
    html = shown.content.decode()
    assert 'id="june-others"' in html and asked["cups"]["id"] in html and "&quot;cups&quot;" in html
    answers = {
        "cups": {"decision": "edit", "tool_input": '{"item": "cups", "quantity": 2}'},
        "pens": {"decision": "approve"},
        "mugs": {"decision": "reject", "message": "no mugs"},
    }
    for item in ("cups", "pens", "mugs"):  # the last call first
        posted = web.post(page, {"input_id": asked[item]["id"], **answers[item]})
        assert posted.status_code == 302, posted.content.decode()[-2000:]
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.COMPLETED, (turn.status, m.Answer.objects.filter(turn_id=turn_id).count())
    assert _orders() == [("cups", 2), ("pens", 20)]
    assert set(m.Answer.objects.filter(turn_id=turn_id).values_list("via", flat=True)) == {"admin"}
