"""When a turn starts and ends, and when each of its events was committed: recorded by the
store in the transactions that make those changes, shown in the turn's JSON, on every event
frame (``at``) and on the turn's admin page (issue 59: ``updated_at`` did not move when a turn
ended, and events carried no time)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from sessions_app import models as m
from sessions_app import selectors
from tests.integration.test_api import BASE, Api, inline_worker, make_user, token_for  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def _at(text: str) -> dt.datetime:
    at = dt.datetime.fromisoformat(text)
    assert at.tzinfo is not None, text  # with its zone
    return at


def test_a_turn_records_when_it_started_and_ended_and_each_event_when_it_was_committed(inline_worker):
    api = Api(token_for(make_user("alice")))
    status, body, _ = api.post(f"{BASE}/s1/turns", {"text": "order blue mugs"})
    assert status == 200 and body["status"] == "completed", body
    turn = m.Turn.objects.get(pk=body["turn_id"])
    assert turn.created_at <= turn.started_at <= turn.ended_at
    assert _at(body["started_at"]) == turn.started_at and _at(body["ended_at"]) == turn.ended_at
    _, again, _ = api.get(f"{BASE}/s1/turns/{turn.pk}")
    assert (again["started_at"], again["ended_at"]) == (body["started_at"], body["ended_at"])
    _, listed, _ = api.get(f"{BASE}/s1/turns")
    assert listed["turns"][0]["ended_at"] == body["ended_at"]

    frames = selectors.events_since(agent="ops", key="s1", after=0)
    assert frames and all("at" in f for f in frames), frames
    times = [_at(f["at"]) for f in frames]
    assert times == sorted(times)  # committed in order
    assert turn.started_at <= times[0] and times[-1] - turn.ended_at < dt.timedelta(seconds=1)
    assert frames[-1]["type"] == "turn.completed"


def test_a_queued_turn_cancelled_ended_without_starting():
    api = Api(token_for(make_user("bob")))
    _, queued, _ = api.post(f"{BASE}/s1/turns?wait=false", {"text": "hello"})
    assert queued["status"] == "queued"
    _, detail, _ = api.get(f"{BASE}/s1/turns/{queued['turn_id']}")
    assert detail["started_at"] is None and detail["ended_at"] is None
    status, body, _ = api.post(f"{BASE}/s1/turns/{queued['turn_id']}/cancel")
    assert status == 200 and body["status"] == "cancelled"
    assert body["started_at"] is None and _at(body["ended_at"]) >= _at(detail["created_at"])
    _, replaced, _ = api.post(f"{BASE}/s1/turns?wait=false", {"text": "one"})
    api.post(f"{BASE}/s1/turns?wait=false&replace=1", {"text": "two"})  # cancels "one" in the session's sweep
    assert m.Turn.objects.get(pk=replaced["turn_id"]).ended_at is not None


def test_the_admin_page_shows_when_the_turn_was_queued_started_and_ended(inline_worker):
    api = Api(token_for(make_user("carol")))
    _, body, _ = api.post(f"{BASE}/s1/turns", {"text": "hello"})
    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True, is_superuser=True)
    web = Client()
    web.force_login(staff)
    page = web.get(f"/admin/sessions_app/turn/{body['turn_id']}/change/").content.decode()
    assert "queued <time" in page and "started <time" in page and "ended <time" in page
    assert "(waited " in page and "(ran " in page
