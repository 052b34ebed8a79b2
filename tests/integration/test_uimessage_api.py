"""The AI SDK chat transport's routes refuse what they must, before any stream: no credentials,
a malformed body, another user's chat, an approval nobody waits for; and answer an idle chat's
resume (204), stop (204) and history (empty) without starting anything."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from sessions_app import models as m
from sessions_app import services

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/agents/ops/chat"


def user_message(text="hi"):
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}


@pytest.fixture
def bearer(django_user_model):
    def make(name):
        user = django_user_model.objects.create_user(name, password=f"pw-{name}-123")
        return user, {"HTTP_AUTHORIZATION": f"Bearer {m.ApiToken.issue(user)[1]}"}

    return make


def post(body, **headers):
    return Client().post(API, data=json.dumps(body), content_type="application/json", **headers)


def code(response):
    return json.loads(response.content)["error"]["code"]


def test_no_credentials_is_a_401():
    assert post({"id": "c1", "messages": [user_message()]}).status_code == 401


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [user_message()]},  # no chat id
        {"id": "../x", "messages": [user_message()]},  # not a session key
        {"id": "c1", "messages": []},
        {"id": "c1", "messages": [user_message()], "trigger": "resume-stream"},
        {"id": "c1", "messages": [{"role": "system", "parts": []}]},
        {"id": "c1", "messages": [{"role": "user", "parts": [{"type": "file", "url": "https://x/y.png"}]}]},
        {"id": "c1", "messages": [{"role": "assistant", "parts": [{"type": "text", "text": "x"}]}]},
    ],
)
def test_a_malformed_body_is_a_400_and_starts_nothing(bearer, body):
    _, auth = bearer("alice")
    response = post(body, **auth)
    assert response.status_code == 400, response.content
    assert code(response) == "bad_request" and not m.Turn.objects.exists()


def test_another_users_chat_is_refused_everywhere(bearer):
    alice, _ = bearer("alice")
    _, bob = bearer("bob")
    services.session_for_user(agent="ops", key="mine", user=alice, create=True)
    assert post({"id": "mine", "messages": [user_message()]}, **bob).status_code == 403
    client = Client()
    assert client.get(f"{API}/mine/stream", **bob).status_code == 403
    assert client.get(f"{API}/mine/messages", **bob).status_code == 403
    assert client.post(f"{API}/mine/cancel", content_type="application/json", **bob).status_code == 403
    assert not m.Turn.objects.exists()


def test_an_approval_nobody_waits_for_is_a_409(bearer):
    alice, auth = bearer("alice")
    services.session_for_user(agent="ops", key="idle", user=alice, create=True)
    part = {
        "type": "dynamic-tool",
        "toolName": "bulk_order",
        "toolCallId": "c1",
        "state": "approval-responded",
        "input": {},
        "approval": {"id": "approve:c1", "approved": True},
    }
    response = post({"id": "idle", "messages": [user_message(), {"role": "assistant", "parts": [part]}]}, **auth)
    assert response.status_code == 409 and code(response) == "not_suspended"


def test_an_idle_chat_resumes_nothing_stops_nothing_and_has_no_history(bearer):
    _, auth = bearer("alice")
    client = Client()
    assert client.get(f"{API}/new-chat/stream", **auth).status_code == 204
    assert client.post(f"{API}/new-chat/cancel", content_type="application/json", **auth).status_code == 204
    response = client.get(f"{API}/new-chat/messages", **auth)
    assert response.status_code == 200 and json.loads(response.content) == {"messages": []}
    assert not m.Session.objects.exists()  # reading a chat creates nothing


AGUI = "/api/agents/ops/agui"


@pytest.mark.parametrize(
    "body",
    [
        {"threadId": "t1", "messages": []},  # no runId
        {"threadId": "../t", "runId": "r", "messages": []},
        {"threadId": "t1", "runId": "r", "messages": "hi"},
        {"threadId": "t1", "runId": "r", "messages": [], "resume": [{"interruptId": "x", "status": "maybe"}]},
    ],
)
def test_agui_refuses_a_malformed_run_input(bearer, body):
    _, auth = bearer("alice")
    response = Client().post(AGUI, data=json.dumps(body), content_type="application/json", **auth)
    assert response.status_code == 400 and code(response) == "bad_request", response.content


def test_agui_without_a_user_message_reattaches_only_to_a_run_under_way(bearer):
    _, auth = bearer("alice")
    body = {"threadId": "t-idle", "runId": "r1", "messages": []}
    response = Client().post(AGUI, data=json.dumps(body), content_type="application/json", **auth)
    assert response.status_code == 409 and code(response) == "not_suspended"
