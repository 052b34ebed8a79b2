"""Kill -9 the worker of a turn with an attachment after its first model step and its tools
committed, just as its second model call starts: a fresh cluster finishes the turn, the stored
file survived, and every model call (the killed one and the replayed one) got the attachment
on one message and its bytes from storage; the finished first call was not made again."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agents_app.models import Attachment
from tests.attachment_files import pdf

from .qcluster import wait_for
from .test_kill import wait_final

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_turn_with_an_attachment_survives_a_kill_mid_turn(clusters, fault_agent, settings, tmp_path):
    from django.contrib.auth import get_user_model

    from sessions_app import attachment_services as attach
    from sessions_app import services
    from sessions_app.models import Message, Turn

    settings.MEDIA_ROOT = str(tmp_path / "media")
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    services.session_for_user(agent=fault_agent, key="att1", user=alice, create=True)
    row = attach.attachment_upload(
        agent=fault_agent, key="att1", user=alice, upload=SimpleUploadedFile("report.pdf", pdf(2))
    )
    cluster = clusters.start(MEDIA_ROOT=settings.MEDIA_ROOT)
    clusters.arm("model1:start")
    turn_id = services.turn_start(
        agent=fault_agent, key="att1", text="mugs", user=alice, source="http", attachments=[row.id]
    ).turn_id
    clusters.reached("model1:start")
    assert clusters.count("attach-ok", turn_id) == 2  # model 0, then model 1 as it starts
    cluster.kill()
    clusters.disarm("model1:start")
    clusters.start(MEDIA_ROOT=settings.MEDIA_ROOT)
    assert wait_final(turn_id) == "completed"
    wait_for(lambda: clusters.count("attach-ok", turn_id) == 3, timeout=10, what="the replayed call's record")
    assert clusters.count("attach-bad", turn_id) == 0
    assert Turn.objects.get(pk=turn_id).attempts >= 2
    openings = [m.data for m in Message.objects.filter(turn_id=turn_id, role="user")]
    assert [[a["id"] for a in d["attachments"]] for d in openings] == [[row.id]]  # the opening was not written twice
    assert Attachment.objects.get(pk=row.id).turn_id == turn_id and row.file.storage.exists(row.file.name)
