"""Resets and "New session" under the user's rate limit.

A user limited to 5 turns a minute made 40 resets of new keys in one minute (40 session, event
and reset rows) and 20 "New session" posts (20 sessions with no turn). Now a reset counts in the
user's window with their turns (a JSON 429 with Retry-After, or the websocket's error frame, and
nothing created once it is full), and "New session" creates nothing at all: the first message
does, under the limit."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from sessions_app import models as m
from tests.integration.test_api import BASE, Api

from .support import make_user, token_for
from .test_ws_probes import _login, _open

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def limited(settings):
    settings.JUNE_RATE_LIMITS = True
    settings.JUNE_RATE_TURNS_PER_MINUTE = 5
    settings.JUNE_QUOTA_CACHE_SECONDS = 0


def _rows() -> tuple[int, int]:
    return m.Session.objects.count(), m.Event.objects.count()


def test_resets_of_new_keys_are_rate_limited_and_create_nothing_refused(limited):
    user = make_user("rita")
    api = Api(token_for(user))
    assert api.post(f"{BASE}/k0/turns?wait=false", {"text": "hi"})[0] == 202  # turns and resets share it
    statuses = []
    for n in range(1, 12):
        status, body, response = api.post(f"{BASE}/k{n}/reset")
        statuses.append(status)
        if status == 429:
            assert body["error"]["code"] == "rate_limited" and int(response["Retry-After"]) >= 1
            assert "JUNE_" not in body["error"]["message"]
    assert statuses == [200] * 4 + [429] * 7, statuses
    before = _rows()
    assert api.post(f"{BASE}/k99/reset")[0] == 429
    assert _rows() == before and m.Session.objects.count() == 5


def test_a_reset_frame_over_the_limit_is_an_error_frame_with_retry_after(limited):
    user = make_user("rita")
    _, cookie = _login(user)
    for n in range(5):
        assert Api(token_for(user)).post(f"{BASE}/r{n}/reset")[0] == 200

    async def scenario() -> dict:
        comm = await _open(cookie, "w1")
        await comm.send_json_to({"type": "reset", "id": "r"})
        reply = await comm.receive_json_from(timeout=30)
        while reply.get("id") != "r":
            reply = await comm.receive_json_from(timeout=30)
        await comm.disconnect()
        return reply

    reply = async_to_sync(scenario)()
    assert reply["type"] == "error" and reply["status"] == 429 and reply["retry_after"] >= 1, reply
    assert not m.Session.objects.filter(key="w1").exists()


def test_new_session_posts_create_nothing(limited):
    user = make_user("rita")
    client = Client()
    client.force_login(user)
    targets = set()
    for _ in range(20):
        response = client.post("/agents/ops/sessions/new")
        assert response.status_code == 302
        targets.add(response["Location"])
    assert len(targets) == 20 and m.Session.objects.count() == 0
    chat = client.get(next(iter(targets)))
    assert chat.status_code == 200 and m.Session.objects.count() == 0  # opening creates nothing either
    assert client.post("/agents/nope/sessions/new").status_code == 404
