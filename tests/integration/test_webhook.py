"""POST /api/agents/<agent>/webhook: signatures (valid, invalid, stale, replayed), the unsigned
rule, size and JSON errors, session ownership, and the webhook policy through the Django path."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth import get_user_model

from agents_app.models import SeenWebhook
from sessions_app import models as m
from sessions_app import wiring
from sessions_app.proactive.channels import sign

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "s3cret-for-tests"
URL = "/api/agents/ops/webhook"


@pytest.fixture(autouse=True)
def secret(monkeypatch, settings):
    settings.JUNE_WEBHOOK_SECRETS = {"OPS": SECRET}
    settings.JUNE_WEBHOOK_URLS = {}


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture
def unsigned(monkeypatch):
    def set_rule(rule: str) -> None:
        monkeypatch.setitem(wiring.agent("ops").settings, "webhook", {"unsigned": rule})

    return set_rule


def post(client, payload, *, ts=None, signature=None, secret=SECRET, raw=None, **headers):
    body = raw if raw is not None else json.dumps(payload).encode()
    if secret is not None and signature is None:
        ts = str(int(time.time())) if ts is None else ts
        signature = sign(secret.encode(), ts, body)
    if ts is not None:
        headers["HTTP_X_JUNE_TIMESTAMP"] = ts
    if signature is not None:
        headers["HTTP_X_JUNE_SIGNATURE"] = signature
    return client.post(URL, data=body, content_type="application/json", **headers)


def test_a_signed_webhook_runs_an_attested_turn_with_the_webhook_policy(client, q2_sync):
    r = post(client, {"session": "hook-1", "text": "stock mugs", "user": "monitor"})
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["attested"] is True and body["session"] == "hook-1"
    turn = m.Turn.objects.get(pk=body["turn_id"])
    assert turn.status == "completed", turn.error
    assert turn.source == "webhook" and turn.kind == "inbound"
    assert turn.input["user"] == {"id": "webhook:monitor", "name": "monitor", "attested": True}
    assert turn.session.owner is None  # webhook sessions belong to no user: staff see them in the admin
    policy = wiring.agent("ops").policy_for("webhook")
    assert turn.policy == policy and policy["deny_tools"] == ["create_order"]
    assert "through a webhook" in policy["system"] and policy["system"].startswith("You are the ops assistant")


def test_a_denied_tool_is_not_offered_to_webhook_turns(client, q2_sync):
    from agents_app.models import Order

    r = post(client, {"session": "hook-2", "text": "order 5 mugs"})
    turn = m.Turn.objects.get(pk=r.json()["turn_id"])
    assert turn.status == "completed" and Order.objects.count() == 0
    # the demo model calls only tools it was offered: create_order was not
    assert not m.Message.objects.filter(session=turn.session, role="tool").exists()


def test_an_invalid_signature_is_refused(client):
    r = post(client, {"session": "h", "text": "hi"}, secret="not-the-secret")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    ts = str(int(time.time()))
    r = post(client, {"session": "h", "text": "hi"}, ts=ts, signature="sha256=" + "0" * 64)
    assert r.status_code == 401
    # a valid signature over a different body
    good = sign(SECRET.encode(), ts, b'{"session": "h", "text": "other"}')
    r = post(client, {"session": "h", "text": "hi"}, ts=ts, signature=good)
    assert r.status_code == 401
    r = post(client, {"session": "h", "text": "hi"}, ts="yesterday", signature=good)
    assert r.status_code == 401
    assert m.Turn.objects.count() == 0


def test_a_stale_or_future_timestamp_is_refused(client):
    for skew in (-301, 400):
        r = post(client, {"session": "h", "text": "hi"}, ts=str(int(time.time()) + skew))
        assert r.status_code == 401 and "window" in r.json()["error"]["message"]
    assert m.Turn.objects.count() == 0


def test_a_replayed_signed_request_is_refused(client, q2_sync):
    ts = str(int(time.time()))
    body = json.dumps({"session": "h", "text": "hello"}).encode()
    signature = sign(SECRET.encode(), ts, body)
    first = post(client, None, raw=body, ts=ts, signature=signature)
    assert first.status_code == 202
    again = post(client, None, raw=body, ts=ts, signature=signature)
    assert again.status_code == 409 and again.json()["error"]["code"] == "replayed"
    assert m.Turn.objects.count() == 1 and SeenWebhook.objects.count() == 1


def test_a_refused_turn_does_not_burn_its_signature(client, q2_sync):
    """A signed request refused after verification (the session is parked) may be retried."""
    post(client, {"session": "parked", "text": "refund order 7 10"})
    ts = str(int(time.time()))
    body = json.dumps({"session": "parked", "text": "hello"}).encode()
    signature = sign(SECRET.encode(), ts, body)
    assert post(client, None, raw=body, ts=ts, signature=signature).status_code == 409
    assert not SeenWebhook.objects.filter(signature=signature[len("sha256=") :]).exists()


def test_unsigned_requests_follow_the_agents_rule(client, q2_sync, unsigned):
    r = post(client, {"session": "u", "text": "hi"}, secret=None)
    assert r.status_code == 401 and "signed" in r.json()["error"]["message"]  # default: refuse
    unsigned("unattested")
    r = post(client, {"session": "u", "text": "hi", "user": "someone"}, secret=None)
    assert r.status_code == 202 and r.json()["attested"] is False
    turn = m.Turn.objects.get(pk=r.json()["turn_id"])
    assert turn.input["user"] == {"id": "webhook:someone", "name": "someone", "attested": False}


def test_an_unattested_webhook_cannot_ask_its_speaker_for_input(client, q2_sync, unsigned):
    """An unattested speaker is never a default answerer: the refund still needs an operator."""
    unsigned("unattested")
    r = post(client, {"session": "u2", "text": "refund order 9 5"}, secret=None)
    turn = m.Turn.objects.get(pk=r.json()["turn_id"])
    assert turn.status == "suspended"
    assert turn.pending["request"]["answerers"] == {
        "policy": "operator",
        "scope": {"kind": "refunds", "requested_by": None},
    }


def test_a_signature_without_a_configured_secret_is_refused(client, monkeypatch, settings):
    settings.JUNE_WEBHOOK_SECRETS = {}
    r = post(client, {"session": "h", "text": "hi"})
    assert r.status_code == 401 and "secret" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "raw, status, code",
    [
        (b"{not json", 400, "bad_request"),
        (b"[1, 2]", 400, "bad_request"),
        (json.dumps({"session": "bad key/", "text": "hi"}).encode(), 400, "bad_request"),
        (json.dumps({"session": "k", "text": "  "}).encode(), 400, "bad_request"),
        (json.dumps({"session": "k", "text": "hi", "user": {"id": 1}}).encode(), 400, "bad_request"),
        (json.dumps({"session": "k", "text": "hi", "source": "web"}).encode(), 400, "bad_request"),
        (json.dumps({"session": "k", "text": "x" * 40_000}).encode(), 413, "payload_too_large"),
        (b"x" * (64 * 1024 + 1), 413, "payload_too_large"),
    ],
)
def test_bad_bodies_get_json_errors(client, raw, status, code):
    r = post(client, None, raw=raw)
    assert (r.status_code, r.json()["error"]["code"]) == (status, code)
    assert m.Turn.objects.count() == 0


def test_method_agent_and_content_type_errors_are_json(client):
    r = client.get(URL)
    assert r.status_code == 405 and r["Allow"] == "POST" and r.json()["error"]["code"] == "method_not_allowed"
    r = client.post("/api/agents/nobody/webhook", data=b"{}", content_type="application/json")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    body = json.dumps({"session": "k", "text": "hi"}).encode()
    ts = str(int(time.time()))
    r = client.post(
        URL,
        data=body,
        content_type="text/plain",
        HTTP_X_JUNE_TIMESTAMP=ts,
        HTTP_X_JUNE_SIGNATURE=sign(SECRET.encode(), ts, body),
    )
    assert r.status_code == 400


def test_a_webhook_cannot_post_into_a_users_session(client, q2_sync):
    """A webhook's sessions live in their own namespace: naming a user's key reaches a
    webhook session of that name, never the user's session."""
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    mine = m.Session.objects.create(agent="ops", key="alice-chat", owner=alice)
    r = post(client, {"session": "alice-chat", "text": "hi"})
    assert r.status_code == 202 and r.json()["session"] == "alice-chat"
    assert not m.Turn.objects.filter(session=mine).exists()
    hook = m.Session.objects.get(agent="ops", key="webhook:alice-chat")
    assert hook.owner is None and m.Turn.objects.filter(session=hook).count() == 1


def test_csrf_does_not_apply_but_the_signature_does(q2_sync):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    assert post(strict, {"session": "c", "text": "hi"}).status_code == 202
    assert post(strict, {"session": "c", "text": "hi"}, secret="wrong").status_code == 401
