"""Answers to a declared tool approval that must be refused (409 or 4xx) and run nothing:
after the turn completed, after the session was reset, to a call already rejected, and
answers of the wrong shape (issue 38 item 2)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from agents_app.models import Order
from agents_app.runtime import TurnStatus
from sessions_app import models as m

from .test_api import Api, make_user, token_for
from .test_tool_approval import answer, parked

pytestmark = pytest.mark.django_db(transaction=True)


def _path(key: str, turn_id: str) -> str:
    return f"/api/agents/ops/sessions/{key}/turns/{turn_id}/resume"


def test_approve_after_the_turn_completed_is_a_409_and_runs_nothing_more(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "r1")
    api = Api(token_for(alice))
    answer(rt, s, turn_id, request, {"decision": "approve"}, alice)
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.COMPLETED
    again = api.post(_path("r1", turn_id), {"input_id": request["id"], "answer": {"decision": "approve"}})
    assert again[0] == 409, again
    async_to_sync(rt.dispatcher.idle)()
    assert Order.objects.count() == 1


def test_approve_after_the_session_was_reset_is_a_409_and_runs_nothing(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, _, turn_id, request = parked(alice, "r2")
    api = Api(token_for(alice))
    status, body, _ = api.post("/api/agents/ops/sessions/r2/reset")
    assert status in (200, 202), (status, body)
    again = api.post(_path("r2", turn_id), {"input_id": request["id"], "answer": {"decision": "approve"}})
    assert again[0] == 409, again
    async_to_sync(rt.dispatcher.idle)()
    assert not Order.objects.exists()
    assert m.Turn.objects.get(pk=turn_id).status != TurnStatus.COMPLETED


def test_an_edit_after_a_reject_is_a_409_and_runs_nothing(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, s, turn_id, request = parked(alice, "r3")
    api = Api(token_for(alice))
    answer(rt, s, turn_id, request, {"decision": "reject", "message": "no"}, alice)
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.COMPLETED
    edit = {"decision": "edit", "input": {"item": "mugs", "quantity": 1}}
    again = api.post(_path("r3", turn_id), {"input_id": request["id"], "answer": edit})
    assert again[0] == 409, again
    async_to_sync(rt.dispatcher.idle)()
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        {"input_id": 7, "answer": {"decision": "approve"}},  # input_id of the wrong type
        {"input_id": ["approve:x"], "answer": {"decision": "approve"}},
        {"answer": {"decision": "approve"}},  # no input_id
        {"input_id": "approve:nope", "answer": {"decision": "approve"}},  # not the pending request
        {"input_id": None, "answer": None},
    ],
)
def test_hostile_answers_are_4xx_and_run_nothing(monkeypatch, body, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    rt, _, turn_id, _ = parked(alice, "r4")
    status, reply, _ = Api(token_for(alice)).post(_path("r4", turn_id), body)
    assert 400 <= status < 500, (status, reply)
    async_to_sync(rt.dispatcher.idle)()
    assert m.Turn.objects.get(pk=turn_id).status == TurnStatus.SUSPENDED and not Order.objects.exists()
