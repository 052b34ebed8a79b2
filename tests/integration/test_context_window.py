"""Issue 40: "A 20,000-character message is accepted without a word on the model's window and then
fails after two compactions." A message that cannot fit the agent's model context window (with
its instructions, characters / 4 as the engine counts) is refused before anything is created:
413 ``context_window_exceeded`` on the API, naming the window and the longest message that fits;
the chat page carries the limit so the composer says it before sending."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from agents_app.providers import ANTHROPIC_CONTEXT_WINDOW, context_window
from agents_app.providers.demo import CONTEXT_WINDOW
from agents_app.runtime import Agent
from sessions_app import models as m
from sessions_app import services, window, wiring

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/agents/ops/sessions"


@pytest.fixture(autouse=True)
def _demo_model(monkeypatch, settings):
    """The ops agent on the demo model (its window: CONTEXT_WINDOW tokens), whatever the shell says."""
    settings.JUNE_MODEL = ""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)


@pytest.fixture
def alice():
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


def _post(client: Client, token: str, text: str):
    response = client.post(
        f"{BASE}/s1/turns?wait=false",
        data=json.dumps({"text": text}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.status_code, response.json()


def test_the_api_refuses_a_message_the_model_cannot_read_with_a_413_naming_the_window(alice):
    client, token = Client(), m.ApiToken.issue(alice, name="test")[1]
    status, body = _post(client, token, "x" * 20_000)
    assert status == 413, body
    assert body["error"]["code"] == "context_window_exceeded"
    room = window.room("ops")
    message = body["error"]["message"]
    assert f"{CONTEXT_WINDOW:,} tokens" in message and f"{room.chars:,} characters" in message
    assert "20,000 characters" in message
    assert not m.Session.objects.exists() and not m.Turn.objects.exists()  # nothing was created

    # the longest message that fits is accepted; one character more is refused
    status, body = _post(client, token, "y" * room.chars)
    assert status == 202, body
    status, body = _post(client, token, "y" * (room.chars + 1))
    assert status == 413 and body["error"]["code"] == "context_window_exceeded"
    assert m.Turn.objects.count() == 1


def test_the_limit_is_the_engines_own_count_of_the_window(alice):
    """At ``room.chars`` the demo model's own overflow test (instructions + message, chars / 4,
    over the window) still passes; one more character and it would not."""
    from agents_app.runtime.compaction import estimate_tokens

    ops = wiring.agent("ops")
    room = window.room("ops")
    assert room.window == CONTEXT_WINDOW
    assert estimate_tokens(len(ops.instructions) + room.chars) <= CONTEXT_WINDOW
    assert estimate_tokens(len(ops.instructions) + room.chars + 1) > CONTEXT_WINDOW
    with pytest.raises(window.ContextWindowExceeded):  # the websocket's start goes through here too
        services.turn_start(agent="ops", key="s2", text="z" * 20_000, user=alice)
    assert not m.Turn.objects.exists()


def test_the_chat_page_carries_the_limit_for_the_composer(alice):
    client = Client()
    client.force_login(alice)
    page = client.get("/agents/ops/sessions/s3/").content.decode()
    config = json.loads(page.split('id="june-config" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert config["window_chars"] == window.room("ops").chars and config["window_tokens"] == CONTEXT_WINDOW


def test_the_window_is_known_without_building_the_model(monkeypatch, settings):
    settings.JUNE_MODEL = ""
    assert context_window(Agent("a", "i", model="demo")) == CONTEXT_WINDOW
    assert context_window(Agent("a", "i", model="anthropic")) == ANTHROPIC_CONTEXT_WINDOW
    assert context_window(Agent("a", "i", model="anthropic", model_config={"context_window": 50_000})) == 50_000
    assert context_window(Agent("a", "i", model="demo", compaction={"context_window": 4_000})) == 4_000
    assert context_window(Agent("a", "i", model="scripted")) is None  # a test's factory is never called


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_the_chat_socket_refuses_it_with_the_same_words_and_stays_usable():
    from tests.integration.test_consumers import communicator, cookie_for, make_user, receive_until_ready, still_usable

    bob = await make_user("bob")
    comm = communicator("/ws/agents/ops/sessions/s4/", await cookie_for(bob))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await comm.send_json_to({"type": "start", "text": "x" * 20_000, "id": 7})
    frame = await comm.receive_json_from(timeout=30)
    assert (frame["type"], frame["code"], frame["status"], frame["id"]) == ("error", "context_window_exceeded", 413, 7)
    assert f"{CONTEXT_WINDOW:,} tokens" in frame["message"]
    await still_usable(comm)
    await comm.disconnect()
