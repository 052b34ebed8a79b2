"""Issue 35 item 0: subagents' sessions are a namespace no user can create.

Pins: users could create sessions whose keys start with ``sub:`` (only ``webhook:`` was
reserved), and a spawn ran its child in whatever session had that key, whoever owned it: bob
posted to ``sub:<alice's turn>:call_5_0:0`` first, then read the task alice's agent delegated
and its findings, and alice got 403 on her own child's session. Now every user-facing way in
(the API, the websocket, the chat page) refuses to create a ``sub:`` session, and a child
session made by a spawn is its parent owner's, readable by her and nobody else."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app import models as m

from .test_api import Api, inline_worker, make_user, token_for  # noqa: F401 (fixture)
from .test_consumers import assert_refused, communicator, cookie_for
from .test_consumers import make_user as amake_user

pytestmark = pytest.mark.django_db(transaction=True)

SQUAT = "sub:0123456789abcdef0123456789abcdef:call_5_0:0"


def test_the_api_refuses_to_create_a_child_session(inline_worker):
    bob = make_user("bob")
    api = Api(token_for(bob))
    for agent in ("researcher", "ops"):
        status, body, _ = api.post(f"/api/agents/{agent}/sessions/{SQUAT}/turns?wait=false", {"text": "hello"})
        assert status == 403 and "subagents" in body["error"]["message"], body
    status, body, _ = api.post("/api/agents/researcher/sessions/sub:anything/reset")
    assert status in (403, 404), body
    assert not m.Session.objects.filter(key__startswith="sub:").exists()
    assert not m.Turn.objects.exists()


def test_the_chat_page_refuses_to_create_a_child_session():
    bob = make_user("bob")
    client = Client()
    client.force_login(bob)
    assert client.get(f"/agents/researcher/sessions/{SQUAT}/").status_code == 403
    assert client.post(f"/agents/researcher/sessions/{SQUAT}/title", {"title": "mine"}).status_code in (403, 404)
    assert not m.Session.objects.filter(key__startswith="sub:").exists()


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")  # a consumer left on the loop is stopped (tests/settle.py)
async def test_the_websocket_refuses_to_create_a_child_session():
    from asgiref.sync import sync_to_async

    bob = await amake_user("bob")
    await assert_refused(communicator(f"/ws/agents/researcher/sessions/{SQUAT}/", await cookie_for(bob)), 4403)
    assert not await sync_to_async(m.Session.objects.filter(key__startswith="sub:").exists)()


def test_a_child_session_is_its_parent_owners_and_nobody_elses(monkeypatch, settings):
    from asgiref.sync import async_to_sync

    from .test_subagents_stream import run_tree

    settings.JUNE_DEMO_DELAY = 0.0
    alice, bob = make_user("alice"), make_user("bob")
    parent = async_to_sync(run_tree)(alice, "r1", "research tides")
    [child] = m.Turn.objects.filter(parent_id=parent)
    assert child.status == "completed" and child.session.key.startswith("sub:") and child.session.owner == alice
    path = f"/api/agents/researcher/sessions/{child.session.key}/turns/{child.pk}"
    status, mine, _ = Api(token_for(alice)).get(path)
    assert status == 200 and mine["status"] == "completed"
    status, theirs, _ = Api(token_for(bob)).get(path)
    assert status == 403
    status, theirs, _ = Api(token_for(bob)).post(
        f"/api/agents/researcher/sessions/{child.session.key}/turns?wait=false", {"text": "what did she ask?"}
    )
    assert status == 403 and m.Turn.objects.filter(session=child.session).count() == 1
