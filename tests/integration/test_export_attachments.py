"""Exports list what was attached: a message that was only an image exported as an empty user
section (Markdown) and ``"text": ""`` (JSON). Each attachment is listed with its name, type and
size and a link its owner downloads it from."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.attachment_files import png
from tests.integration.test_api import BASE, Api, inline_worker, make_user, token_for  # noqa: F401 (fixture)
from tests.integration.test_attachments import upload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.mark.usefixtures("inline_worker")
def test_an_image_only_message_exports_its_attachment():
    alice = make_user("alice")
    api = Api(token_for(alice))
    status, photo = upload(api, "mug [1].png", png())
    assert status == 201
    status, body, _ = api.post(f"{BASE}/s1/turns", {"text": "", "attachments": [photo["id"]]})
    assert status == 200 and body["status"] == "completed", body

    web = Client()
    web.force_login(alice)
    doc = json.loads(web.get("/agents/ops/sessions/s1/export.json").content)
    first = doc["messages"][0]
    assert first["role"] == "user" and first["text"] == ""
    url = f"http://testserver{BASE}/s1/attachments/{photo['id']}"
    assert first["attachments"] == [
        {"id": photo["id"], "name": "mug [1].png", "type": "image/png", "size": len(png()), "pages": None, "url": url}
    ]
    assert b"".join(web.get(url).streaming_content) == png()  # the link works for its owner
    assert Client().get(url).status_code in (401, 403)  # and for nobody else

    md = web.get("/agents/ops/sessions/s1/export.md").content.decode()
    section = md.split("## User · #0", 1)[1].split("\n## ", 1)[0]
    assert f"- Attached: [mug \\[1\\].png](<{url}>) (image/png, {len(png())} bytes)" in section

    api_md = api.client.get(f"{BASE}/s1/export", {"format": "md"}, **api.headers).content.decode()
    assert f"(<{url}>)" in api_md
