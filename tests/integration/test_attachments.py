"""Attachments through the HTTP API: upload (type sniffed from the bytes, size and count limits),
a turn that takes them (the demo model says what it got), the owner-only download, reset keeping
the files and a deleted session taking them along. Turns run on the inline worker."""

from __future__ import annotations

import json

import pytest
from django.core.files.storage import default_storage
from django.test import Client
from django.urls import reverse

from agents_app import attachments as files
from agents_app.models import Attachment
from sessions_app import models as m
from sessions_app import selectors
from tests.attachment_files import GIF, HTML, JPEG, WEBP, pdf, png
from tests.integration.test_api import BASE, Api, inline_worker, make_user, token_for  # noqa: F401 (fixture)

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


def upload(api: Api, name: str, data: bytes, *, session: str = "s1", content_type: str = "application/octet-stream"):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = api.client.post(
        f"{BASE}/{session}/attachments",
        {"file": SimpleUploadedFile(name, data, content_type=content_type)},
        **api.headers,
    )
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.status_code, json.loads(response.content)


@pytest.mark.parametrize(
    "name,data,kind,pages",
    [
        ("dot.png", png(), "image/png", None),
        ("dot.jpg", JPEG, "image/jpeg", None),
        ("dot.gif", GIF, "image/gif", None),
        ("dot.webp", WEBP, "image/webp", None),
        ("report.pdf", pdf(3), "application/pdf", 3),
    ],
)
def test_every_accepted_type_uploads_with_its_sniffed_type(api, alice, name, data, kind, pages):
    status, body = upload(api, name, data)
    assert status == 201, body
    assert body == {"id": body["id"], "type": kind, "name": name, "size": len(data), "pages": pages}
    row = Attachment.objects.get(pk=body["id"])
    assert (row.owner_id, row.agent, row.session_key, row.turn_id) == (alice.pk, "ops", "s1", "")
    assert files.read(body["id"]) == data and row.file.name == files.storage_name(body["id"])


def test_the_type_comes_from_the_bytes_not_the_name(api):
    status, body = upload(api, "cute.png", HTML, content_type="image/png")
    assert status == 415 and body["error"]["code"] == "unsupported_media_type"
    assert not m.Session.objects.exists()  # an upload creates no session: the first message does
    status, body = upload(api, "scan.bin", png())  # a PNG with any name is a PNG
    assert status == 201 and body["type"] == "image/png"
    assert Attachment.objects.count() == 1


def test_an_oversize_file_is_a_413_json_and_stores_nothing(api, settings):
    settings.JUNE_ATTACHMENT_MAX_BYTES = 1000
    status, body = upload(api, "big.pdf", pdf(1) + b"%" * 2000)
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert Attachment.objects.count() == 0


def test_a_hostile_file_name_is_cleaned(api):
    status, body = upload(api, "../../etc/<b>x\u0000\u202e.png", png())
    assert (
        status == 201 and body["name"] == "<b>x.png"
    )  # the path and control characters gone; HTML is escaped where shown


@pytest.mark.usefixtures("inline_worker")
def test_a_turn_with_attachments_reaches_the_model(api):
    _, photo = upload(api, "photo.png", png())
    _, report = upload(api, "report.pdf", pdf(3))
    status, body, _ = api.post(
        f"{BASE}/s1/turns", {"text": "what are these?", "attachments": [photo["id"], report["id"]]}
    )
    assert status == 200, body
    assert body["text"].startswith(
        f"I received 2 attachments: photo.png (image/png, {photo['size']:,} bytes); "
        f"report.pdf (application/pdf, 3 pages, {report['size']:,} bytes)."
    )
    turn = m.Turn.objects.get(pk=body["turn_id"])
    assert [a["id"] for a in turn.input["attachments"]] == [photo["id"], report["id"]]
    assert m.Message.objects.get(session=turn.session, index=0).data["attachments"] == [photo, report]
    assert set(Attachment.objects.values_list("turn_id", flat=True)) == {turn.pk}
    # the log's turn.started refers to the opening message, and reads back with its attachments
    row = m.Event.objects.get(session=turn.session, type="turn.started")
    assert "attachments" not in (row.data if isinstance(row.data, dict) else {})
    started = [e for e in selectors.events_since(agent="ops", key="s1", after=0) if e["type"] == "turn.started"]
    assert started[0]["attachments"] == [photo, report] and started[0]["text"] == "what are these?"


def test_an_attachment_opens_one_turn_only(api):
    _, photo = upload(api, "photo.png", png())
    status, _, _ = api.post(f"{BASE}/s1/turns?wait=false", {"text": "one", "attachments": [photo["id"]]})
    assert status == 202
    status, body, _ = api.post(f"{BASE}/s1/turns?wait=false", {"text": "two", "attachments": [photo["id"]]})
    assert status == 409, body
    assert m.Turn.objects.count() == 1


@pytest.mark.usefixtures("inline_worker")
def test_multipart_turn_uploads_and_starts_in_one_request(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = api.client.post(
        f"{BASE}/s1/turns",
        {"text": "", "file": [SimpleUploadedFile("a.gif", GIF), SimpleUploadedFile("b.pdf", pdf(2))]},
        **api.headers,
    )
    body = json.loads(response.content)
    assert response.status_code == 200, body
    assert body["text"].startswith("I received 2 attachments: a.gif (image/gif, ")
    assert "b.pdf (application/pdf, 2 pages, " in body["text"]


def test_too_many_attachments_is_refused(api, settings):
    settings.JUNE_ATTACHMENTS_PER_MESSAGE = 2
    ids = [upload(api, f"{n}.png", png())[1]["id"] for n in range(3)]
    status, body, _ = api.post(f"{BASE}/s1/turns?wait=false", {"text": "x", "attachments": ids})
    assert status == 413 and body["error"]["code"] == "payload_too_large"
    assert m.Turn.objects.count() == 0 and not Attachment.objects.exclude(turn_id="").exists()


def test_another_user_can_neither_use_nor_download_nor_remove_my_attachment(api, alice):
    _, photo = upload(api, "photo.png", png())
    bob = Api(token_for(make_user("bob")))
    for path in (f"{BASE}/s1/attachments/{photo['id']}", f"{BASE}/bob1/attachments/{photo['id']}"):
        status, body, _ = bob.get(path)
        assert status == 404 and "error" in body
    api.post(f"{BASE}/s1/turns?wait=false", {"text": "mine"})  # s1 exists now, alice's
    status, body = upload(bob, "b.png", png(), session="s1")
    assert status == 403 and body["error"]["code"] == "forbidden"
    status, body, _ = bob.post(f"{BASE}/bob1/turns?wait=false", {"text": "steal", "attachments": [photo["id"]]})
    assert status == 404, body
    status, body, _ = bob.call("delete", f"{BASE}/bob1/attachments/{photo['id']}")
    assert status == 404
    assert Attachment.objects.get(pk=photo["id"]).turn_id == ""
    # the owner downloads it, inline for an image, sandboxed
    response = api.client.get(f"{BASE}/s1/attachments/{photo['id']}", **api.headers)
    assert response.status_code == 200 and b"".join(response.streaming_content) == png()
    assert response["Content-Type"] == "image/png" and "sandbox" in response["Content-Security-Policy"]


def test_a_pdf_downloads_as_an_attachment(api):
    _, report = upload(api, "report.pdf", pdf(1))
    response = api.client.get(f"{BASE}/s1/attachments/{report['id']}", **api.headers)
    assert response.status_code == 200 and response["Content-Disposition"].startswith("attachment;")


def test_an_unsent_upload_can_be_removed_a_sent_one_cannot(api):
    _, photo = upload(api, "photo.png", png())
    name = Attachment.objects.get(pk=photo["id"]).file.name
    response = api.client.delete(f"{BASE}/s1/attachments/{photo['id']}", **api.headers)
    assert response.status_code == 204 and not Attachment.objects.exists()
    assert not default_storage.exists(name)
    _, sent = upload(api, "sent.png", png())
    api.post(f"{BASE}/s1/turns?wait=false", {"text": "x", "attachments": [sent["id"]]})
    status, _, _ = api.call("delete", f"{BASE}/s1/attachments/{sent['id']}")
    assert status == 409 and Attachment.objects.filter(pk=sent["id"]).exists()


@pytest.mark.usefixtures("inline_worker")
def test_reset_keeps_the_files_and_deleting_the_session_deletes_them(api, alice):
    _, photo = upload(api, "photo.png", png())
    status, body, _ = api.post(f"{BASE}/s1/turns", {"text": "see", "attachments": [photo["id"]]})
    assert status == 200, body
    name = Attachment.objects.get(pk=photo["id"]).file.name
    status, _, _ = api.post(f"{BASE}/s1/reset")
    assert status == 200
    assert default_storage.exists(name) and files.read(photo["id"]) == png()
    assert api.client.get(f"{BASE}/s1/attachments/{photo['id']}", **api.headers).status_code == 200
    # both archives show it: the owner's page and the staff admin's generation page
    page = api.client
    page.force_login(alice)
    html = page.get(reverse("sessions_app:archive-generation", kwargs={"agent": "ops", "key": "s1", "generation": 0}))
    href = f"{BASE}/s1/attachments/{photo['id']}"
    assert html.status_code == 200 and f'<img src="{href}" alt="photo.png"' in html.content.decode()
    staff = make_user("root")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    page.force_login(staff)
    session = m.Session.objects.get(agent="ops", key="s1")
    admin = page.get(reverse("admin:sessions_app_session_generation", args=[session.pk, 0])).content.decode()
    assert f'href="{href}"' in admin
    assert page.get(href).status_code == 200  # staff read it, as they read the archive
    session.delete()
    assert not Attachment.objects.exists()
    assert not default_storage.exists(name) and files.read(photo["id"]) is None


def test_uploads_with_a_cookie_need_csrf(alice):
    from django.core.files.uploadedfile import SimpleUploadedFile

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = browser.post(f"{BASE}/s1/attachments", {"file": SimpleUploadedFile("a.png", png())})
    assert response.status_code == 403 and json.loads(response.content)["error"]["code"] == "csrf_failed"
    assert not Attachment.objects.exists()


def test_a_file_larger_than_the_form_limit_uploads_with_a_cookie_and_csrf(alice):
    """Regression guard: a multipart body over DATA_UPLOAD_MAX_MEMORY_SIZE (256 KiB) must still
    parse (the form-text guard cannot read it whole; files do not count toward that limit)."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    big = pdf(2) + b"%" * (1024 * 1024)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    browser.get("/agents/ops/sessions/s1/")  # sets the CSRF cookie, as the chat page does
    token = browser.cookies["csrftoken"].value
    response = browser.post(
        f"{BASE}/s1/attachments", {"file": SimpleUploadedFile("big.pdf", big)}, HTTP_X_CSRFTOKEN=token
    )
    body = json.loads(response.content)
    assert response.status_code == 201, body
    assert body["size"] == len(big) and body["pages"] == 2 and files.read(body["id"]) == big


def test_unsent_uploads_are_bounded_per_user(api, settings):
    settings.JUNE_ATTACHMENTS_PER_MESSAGE = 1  # 4 unsent at most, all sessions together
    for n in range(4):
        assert upload(api, "p.png", png(), session=f"s{n % 2}")[0] == 201
    status, body = upload(api, "p.png", png(), session="s9")
    assert status == 413 and "unsent" in body["error"]["message"]
    assert Attachment.objects.count() == 4


def test_the_sweeper_deletes_uploads_nobody_sent_and_keeps_the_rest(api, settings, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app.workers import watchdog

    _, old = upload(api, "old.png", png())
    _, fresh = upload(api, "fresh.png", png())
    _, sent = upload(api, "sent.png", png())
    api.post(f"{BASE}/s1/turns?wait=false", {"text": "x", "attachments": [sent["id"]]})
    long_ago = timezone.now() - timedelta(hours=settings.JUNE_UNSENT_ATTACHMENT_HOURS + 1)
    Attachment.objects.filter(pk__in=[old["id"], sent["id"]]).update(created_at=long_ago)
    old_file = Attachment.objects.get(pk=old["id"]).file.name
    monkeypatch.setattr(watchdog, "_unsent_swept_at", None)
    watchdog._unsent_pass()  # the watchdog's pass, as a worker runs it
    assert set(Attachment.objects.values_list("pk", flat=True)) == {fresh["id"], sent["id"]}
    assert not default_storage.exists(old_file)
    status, body, _ = api.post(f"{BASE}/s2/turns?wait=false", {"text": "y", "attachments": [old["id"]]})
    assert status == 404, body
    watchdog._unsent_pass()  # throttled: a second pass within the period does nothing
    Attachment.objects.filter(pk=fresh["id"]).update(created_at=long_ago)
    watchdog._unsent_pass()
    assert Attachment.objects.filter(pk=fresh["id"]).exists()


def test_staff_list_attachments_and_a_deleted_row_takes_its_file(api, alice):
    _, photo = upload(api, "photo.png", png())
    name = Attachment.objects.get(pk=photo["id"]).file.name
    staff = make_user("root")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    admin = Client()
    admin.force_login(staff)
    listing = admin.get(reverse("admin:agents_app_attachment_changelist"))
    assert listing.status_code == 200 and "photo.png" in listing.content.decode()
    url = reverse("admin:agents_app_attachment_delete", args=[photo["id"]])
    assert admin.post(url, {"post": "yes"}).status_code == 302
    assert not Attachment.objects.exists() and not default_storage.exists(name)
    alice_view = Client()
    alice_view.force_login(alice)
    assert alice_view.get(reverse("admin:agents_app_attachment_changelist")).status_code == 302  # not staff


@pytest.mark.usefixtures("inline_worker")
def test_a_regenerated_turn_sends_its_attachments_again(api):
    """A regenerate re-sends the opening's attachments (their metadata; the bytes are the same
    files), and the model gets them; an edit takes new uploads like a start."""
    _, photo = upload(api, "photo.png", png())
    status, body, _ = api.post(f"{BASE}/s1/turns", {"text": "what is this?", "attachments": [photo["id"]]})
    assert status == 200, body
    status, again, _ = api.post(f"{BASE}/s1/turns/{body['turn_id']}/regenerate")
    assert status == 202, again
    turn = m.Turn.objects.get(pk=again["turn_id"])
    assert turn.status == "completed" and turn.text.startswith("I received 1 attachment: photo.png")
    assert m.Message.objects.get(session=turn.session, generation=1, index=0).data["attachments"] == [photo]
    _, other = upload(api, "other.png", png(3, 3))
    status, edited, _ = api.post(f"{BASE}/s1/messages/0/fork", {"text": "and this?", "attachments": [other["id"]]})
    assert status == 202, edited
    turn = m.Turn.objects.get(pk=edited["turn_id"])
    assert turn.text.startswith("I received 1 attachment: other.png") and turn.generation == 2
    assert Attachment.objects.get(pk=other["id"]).turn_id == turn.pk


@pytest.mark.parametrize("path", ["attachments", "turns?wait=false"])
def test_a_file_under_another_field_name_is_told_the_field_is_file(api, path):
    """A multipart body whose file is under another name (``-F upload=@a.png``, a form's
    ``files``) was refused without naming the field the API reads: the answer says ``file``."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = api.client.post(
        f"{BASE}/s1/{path}", {"text": "look", "upload": SimpleUploadedFile("a.png", png())}, **api.headers
    )
    body = json.loads(response.content)
    assert response.status_code == 400, body
    message = body["error"]["message"]
    assert "'upload'" in message and "'file'" in message, message
    assert not Attachment.objects.exists()
