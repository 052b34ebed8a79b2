"""The chat websocket's ``start`` frame with attachments: checked as the API checks them (the
same service), so another user's id is a 404, a malformed list a 400, and a good one is taken."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile

from agents_app.models import Attachment
from tests.attachment_files import png
from tests.integration.test_consumers import (
    communicator,
    cookie_for,
    expect_error,
    make_user,
    receive_until_ready,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("settled")]


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


@sync_to_async
def uploaded(user, key: str) -> str:
    from sessions_app import attachment_services as attach
    from sessions_app import services

    services.session_for_user(agent="ops", key=key, user=user, create=True)
    return attach.attachment_upload(agent="ops", key=key, user=user, upload=SimpleUploadedFile("p.png", png())).id


async def test_a_start_frame_takes_only_the_senders_own_attachments():
    alice, bob = await make_user("alice"), await make_user("bob")
    mine = await uploaded(alice, "s1")
    bobs = await uploaded(bob, "b1")
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await expect_error(comm, json.dumps({"type": "start", "text": "x", "attachments": [bobs]}), "not_found", 404)
    await expect_error(comm, json.dumps({"type": "start", "text": "x", "attachments": None}), "bad_request", 400)
    await expect_error(comm, json.dumps({"type": "start", "text": "x", "attachments": [1]}), "bad_request", 400)
    await expect_error(
        comm, json.dumps({"type": "start", "text": "x", "attachments": [mine, mine]}), "bad_request", 400
    )
    await comm.send_json_to({"type": "start", "text": "", "attachments": [mine], "id": "f1"})
    while (frame := await comm.receive_json_from(timeout=30)).get("id") != "f1":
        pass
    assert frame["type"] == "ack" and frame["turn_id"], frame
    taken = await sync_to_async(lambda: dict(Attachment.objects.values_list("id", "turn_id")))()
    assert taken == {mine: frame["turn_id"], bobs: ""}
    await comm.disconnect()
