"""An attacker's probes of the uploads: refused multipart starts, the unsent cap under parallel
uploads, uploads into keys a channel owns, and the way out (list and remove unsent uploads).

Four 409 starts carrying 5 files each left 20 orphaned uploads (their ids never returned); after
that every upload answered 413 "too many unsent attachments" for 24 h, with no way to list or
delete them. 429 and 413 refusals left uploads too. The cap (20) was check-then-insert: two web
processes stored 21 of 40 parallel uploads. ``webhook:…``, ``sub:…`` and a schedule's key took
uploads (201) where a turn on the same key is a 403."""

from __future__ import annotations

import json
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.test import Client

from agents_app.models import Attachment
from sessions_app import models as m
from tests.attachment_files import GIF, png
from tests.integration.test_api import BASE, Api
from tests.integration.test_attachments import upload

from .support import make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


@pytest.fixture
def alice():
    return make_user("alice")


@pytest.fixture
def api(alice):
    return Api(token_for(alice))


def _stored(media) -> int:
    return sum(1 for p in media.rglob("*") if p.is_file()) if media.exists() else 0


def _multipart(api: Api, session: str, count: int, *, text: str = "look"):
    files = [SimpleUploadedFile(f"{n}.gif", GIF) for n in range(count)]
    response = api.client.post(f"{BASE}/{session}/turns?wait=false", {"text": text, "file": files}, **api.headers)
    return response.status_code, json.loads(response.content)


def test_refused_multipart_starts_leave_no_upload(api, settings, media):
    """Every refusal of a multipart start (429 rate limit, 413 unsent cap reached mid-request,
    413 too many files, 403 a key a channel owns) leaves no row and no file behind."""
    settings.JUNE_ATTACHMENTS_PER_MESSAGE = 3  # the unsent cap: 12
    for n in range(10):
        assert upload(api, "p.png", png(), session="keep")[0] == 201
    before = (Attachment.objects.count(), _stored(media))

    status, body = _multipart(api, "s1", 3)  # the 11th and 12th fit, the 13th does not
    assert status == 413 and "unsent" in body["error"]["message"], body
    assert (Attachment.objects.count(), _stored(media)) == before

    status, body = _multipart(api, "s1", 4)  # over a message's count: refused before storing
    assert status == 413, body
    status, body = _multipart(api, "webhook:s1", 1)
    assert status == 403, body
    assert (Attachment.objects.count(), _stored(media)) == before

    Attachment.objects.filter(session_key="keep").delete()
    settings.JUNE_RATE_LIMITS = True
    settings.JUNE_RATE_TURNS_PER_MINUTE = 1
    assert _multipart(api, "s2", 2)[0] == 202
    kept = (Attachment.objects.count(), _stored(media))
    assert kept[0] == 2
    status, body = _multipart(api, "s2", 3)
    assert status == 429, body
    assert (Attachment.objects.count(), _stored(media)) == kept
    assert m.Turn.objects.count() == 1


def test_a_409_multipart_start_leaves_no_upload(api, alice, media, monkeypatch):
    """A multipart start into a session whose turn is parked on an answer (409
    ``session_suspended``), then into one a person has taken over (409 ``taken_over``): each
    refusal leaves no row and no file, and the user's next upload is not held back by them."""
    from django_q.conf import Conf

    from sessions_app import services, takeover

    monkeypatch.setattr(Conf, "SYNC", True)
    rec = services.turn_start(agent="ops", key="s1", text="refund order 42 10", user=alice)
    assert m.Turn.objects.get(pk=rec.turn_id).status == "suspended"
    services.turn_start(agent="ops", key="s2", text="hello", user=alice)
    takeover.takeover_begin(session=m.Session.objects.get(key="s2"), user=make_user("olga", operator=True))
    for _ in range(4):
        for session, code in (("s1", "session_suspended"), ("s2", "taken_over")):
            status, body = _multipart(api, session, 5)
            assert (status, body["error"]["code"]) == (409, code), body
    assert (Attachment.objects.count(), _stored(media)) == (0, 0)
    assert m.Turn.objects.count() == 2
    assert upload(api, "p.png", png(), session="s3")[0] == 201


def test_the_unsent_cap_holds_under_parallel_uploads(alice, settings):
    """40 parallel uploads of one user (each thread its own connection, as two web processes):
    exactly the cap is stored, the rest are 413."""
    settings.JUNE_ATTACHMENTS_PER_MESSAGE = 5  # the cap: 20
    token = token_for(alice)
    statuses: list[int] = []
    start = threading.Barrier(40)

    def one(n: int) -> None:
        try:
            start.wait(timeout=60)
            response = Client().post(
                f"{BASE}/p{n % 4}/attachments",
                {"file": SimpleUploadedFile("p.png", png())},
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )
            statuses.append(response.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert Attachment.objects.filter(owner_id=alice.pk, turn_id="").count() == 20
    assert sorted(statuses) == [201] * 20 + [413] * 20, sorted(statuses)


@pytest.mark.parametrize("key", ["webhook:orders", "sub:abc.1", "ops-inbox"])
def test_uploads_into_a_key_a_channel_owns_are_refused_as_a_turn_is(api, key, media):
    """The webhook's, the subagents' and a schedule's (``ops-inbox``, the demo schedule's
    session) keys: an upload is a 403, as a turn on the same key, and stores nothing."""
    status, body = upload(api, "p.png", png(), session=key)
    assert status == 403, body
    turn_status, _, _ = api.post(f"{BASE}/{key}/turns?wait=false", {"text": "hi"})
    assert turn_status == 403
    assert not Attachment.objects.exists() and _stored(media) == 0
    assert upload(api, "p.png", png(), session="a-new-session")[0] == 201  # a new key of one's own: fine


def test_unsent_uploads_can_be_listed_and_removed(api, alice):
    """The way out of the cap: ``GET /api/attachments/unsent`` lists the caller's unsent uploads
    (every session, nobody else's), ``DELETE`` removes them; a sent one stays with its turn."""
    other = Api(token_for(get_user_model().objects.create_user("bob", password="pw-bob-12345")))
    _, mine = upload(api, "a.png", png(), session="s1")
    _, sent = upload(api, "b.png", png(), session="s2")
    _, theirs = upload(other, "c.png", png(), session="s1")
    assert api.post(f"{BASE}/s2/turns?wait=false", {"text": "x", "attachments": [sent["id"]]})[0] == 202

    status, body, _ = api.get("/api/attachments/unsent")
    assert status == 200
    assert [(a["id"], a["agent"], a["session"]) for a in body["attachments"]] == [(mine["id"], "ops", "s1")]

    status, body, _ = api.call("delete", "/api/attachments/unsent")
    assert status == 200 and body == {"removed": 1}
    assert set(Attachment.objects.values_list("id", flat=True)) == {sent["id"], theirs["id"]}
    assert Api(None).get("/api/attachments/unsent")[0] == 401


def test_a_refused_ui_chat_start_with_files_leaves_nothing(api, settings, media):
    """The AI SDK's chat endpoint (``POST …/chat``, files as data: URLs) uploads its files before
    the start: a start refused by the rate limit keeps neither the files nor a session."""
    import base64

    settings.JUNE_RATE_LIMITS = True
    settings.JUNE_RATE_TURNS_PER_MINUTE = 1
    assert api.post(f"{BASE}/first/turns?wait=false", {"text": "hi"})[0] == 202
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    message = {"id": "u1", "role": "user", "parts": [{"type": "file", "url": url, "filename": "a.png"}]}
    status, body, _ = api.post("/api/agents/ops/chat", {"id": "ui1", "messages": [message]})
    assert status == 429, body
    assert not Attachment.objects.exists() and _stored(media) == 0
    assert not m.Session.objects.filter(key="ui1").exists()
