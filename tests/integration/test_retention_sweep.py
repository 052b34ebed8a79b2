"""Retention with the clock moved forward: idle sessions, archived generations and uploads go
when their agent's (or the site's) time is up, in bounded passes; a dry run only reports; a
session under legal hold or with an unfinished turn stays; what the deleted turns spent stays
in the usage totals; the sweep is audited and scheduled."""

from __future__ import annotations

import datetime as dt
import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.utils import timezone
from django_q.models import Schedule

from agents_app.loader import load_agent
from agents_app.models import Attachment
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.keeping import effective_retention, retention_config
from sessions_app import attachment_services, services
from sessions_app import models as m
from sessions_app.retention import retention_sweep
from sessions_app.workers.tasks import PRIVACY_SCHEDULE, PRIVACY_SWEEP, ensure_privacy_schedule
from tests.attachment_files import png

pytestmark = pytest.mark.django_db(transaction=True)

LATER = dt.timedelta(days=31)


@pytest.fixture
def alice(monkeypatch, settings, tmp_path):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return get_user_model().objects.create_user("alice", password="pw-alice-123")


def chat(user, key: str, text: str = "hello") -> None:
    services.turn_start(agent="ops", key=key, text=text, user=user)


def test_idle_sessions_go_after_their_time_and_the_rest_stays(alice, settings):
    settings.JUNE_RETENTION = {"sessions_days": 30}
    for key in ("old", "recent", "held"):
        chat(alice, key)
    services.turn_start(agent="ops", key="busy", text="refund order 42 10", user=alice)  # parked
    m.Session.objects.filter(key="held").update(legal_hold=True)
    m.Session.objects.filter(key="recent").update(updated_at=timezone.now() + dt.timedelta(days=20))
    spent = m.Turn.objects.filter(session__key="old").values_list("usage", flat=True).get()
    now = timezone.now() + LATER

    dry = retention_sweep(now=now, dry_run=True)
    assert dry == {"dry_run": True, "would_delete": {"sessions": 1}, "agents": {"ops": {"sessions": 1}}}
    assert m.Session.objects.count() == 4 and not m.AuditEvent.objects.exists()

    done = retention_sweep(now=now)
    assert done["deleted"]["sessions"] == 1 and done["deleted"]["messages"] >= 2 and done["deleted"]["turns"] == 1
    assert sorted(m.Session.objects.values_list("key", flat=True)) == ["busy", "held", "recent"]
    assert not m.Message.objects.filter(session__key="old").exists()
    # what the deleted turn spent stays, linked to no session and no user
    (total,) = m.UsageTotal.objects.all()
    assert total.agent == "ops" and total.turns == 1
    assert total.usage.get("output_tokens") == spent.get("output_tokens")
    (row,) = m.AuditEvent.objects.filter(action=m.AuditAction.RETENTION)
    assert row.actor == "" and row.detail["deleted"] == done["deleted"]
    # nothing more is due: a second pass deletes nothing and writes no audit row
    assert retention_sweep(now=now)["deleted"] == {}
    assert m.AuditEvent.objects.filter(action=m.AuditAction.RETENTION).count() == 1


def test_a_pass_deletes_at_most_its_batch(alice, settings):
    settings.JUNE_RETENTION = {"sessions_days": 30}
    for n in range(3):
        chat(alice, f"s{n}")
    now = timezone.now() + LATER
    assert retention_sweep(now=now, batch=2)["deleted"]["sessions"] == 2
    assert retention_sweep(now=now, batch=2)["deleted"]["sessions"] == 1
    assert not m.Session.objects.exists()


def test_archived_generations_go_and_the_live_one_stays(alice, settings):
    settings.JUNE_RETENTION = {"archived_days": 30}
    chat(alice, "s1", "first generation")
    services.session_reset(agent="ops", key="s1", user=alice)
    chat(alice, "s1", "second generation")
    session = m.Session.objects.get(key="s1")
    live = session.generation
    # the live generation's turn was active just now (+31 days): it stays
    m.Turn.objects.filter(session=session, generation=live).update(updated_at=timezone.now() + LATER)
    done = retention_sweep(now=timezone.now() + LATER)
    assert done["deleted"]["generations"] == 1 and done["deleted"]["resets"] == 1, done
    assert set(m.Message.objects.filter(session=session).values_list("generation", flat=True)) == {live}
    assert not m.SessionReset.objects.exists() and m.Session.objects.filter(pk=session.pk).exists()


def test_uploads_go_after_their_time_and_their_messages_stay(alice, settings):
    settings.JUNE_RETENTION = {"attachments_days": 30}
    upload = attachment_services.attachment_upload(
        agent="ops", key="f1", user=alice, upload=SimpleUploadedFile("dot.png", png(), "image/png")
    )
    chat_with = services.turn_start(agent="ops", key="f1", text="look", user=alice, attachments=[upload.id])
    name = upload.file.name
    assert default_storage.exists(name)
    assert retention_sweep(now=timezone.now() + LATER)["deleted"] == {"attachments": 1}
    assert not Attachment.objects.exists() and not default_storage.exists(name)
    assert m.Message.objects.filter(turn_id=chat_with.turn_id, role="user").exists()


def test_an_agent_declares_its_own_retention_over_the_sites(tmp_path):
    folder = tmp_path / "keeper"
    folder.mkdir()
    (folder / "agent.py").write_text('retention = {"sessions_days": 7, "attachments_days": None}\n')
    agent = load_agent(folder)
    assert agent.retention == {"sessions_days": 7.0, "attachments_days": None}
    site = retention_config({"sessions_days": 365, "attachments_days": 30, "archived_days": 90}, owner="site")
    assert effective_retention(site, agent.retention) == {
        "sessions_days": 7.0,
        "archived_days": 90.0,
        "attachments_days": None,
    }
    for bad in ({"session_days": 3}, {"sessions_days": 0}, {"sessions_days": True}, ["sessions_days"]):
        with pytest.raises(AgentConfigError):
            retention_config(bad, owner="agent 'x'")


def test_the_sweep_is_scheduled_and_runs_from_the_command(alice, settings):
    settings.JUNE_RETENTION = {}
    ensure_privacy_schedule()
    ensure_privacy_schedule()
    (row,) = Schedule.objects.filter(name=PRIVACY_SCHEDULE)
    assert row.func == PRIVACY_SWEEP and row.repeats == -1
    chat(alice, "s1")
    out, err = StringIO(), StringIO()
    call_command("june", "retention", "--dry-run", stdout=out, stderr=err)
    assert json.loads(out.getvalue()) == {"dry_run": True, "would_delete": {}, "agents": {}}
    # a newcomer reading "agents": {} is told why nothing would go (stdout stays one JSON object)
    assert "retention is off for every agent" in err.getvalue()
    settings.JUNE_RETENTION = {"sessions_days": 30}
    err = StringIO()
    call_command("june", "retention", "--dry-run", stdout=StringIO(), stderr=err)
    assert err.getvalue() == ""


def test_superusers_place_and_release_a_legal_hold_in_the_admin(alice, settings):
    from django.test import Client
    from django.urls import reverse

    chat(alice, "s1")
    session = m.Session.objects.get(key="s1")
    changelist = reverse("admin:sessions_app_session_changelist")
    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True)
    sam = Client()
    sam.force_login(staff)
    sam.post(changelist, {"action": "hold_sessions", "_selected_action": [session.pk]})
    assert not m.Session.objects.get(pk=session.pk).legal_hold
    root = Client()
    root.force_login(get_user_model().objects.create_superuser("root", password="pw-root-123"))
    root.post(changelist, {"action": "hold_sessions", "_selected_action": [session.pk]})
    assert m.Session.objects.get(pk=session.pk).legal_hold
    settings.JUNE_RETENTION = {"sessions_days": 30}
    assert retention_sweep(now=timezone.now() + LATER)["deleted"] == {}
    # an erasure of the owner keeps it too, and says so
    from sessions_app.privacy import user_erase

    assert user_erase(user=alice)["kept_on_legal_hold"] == 1 and m.Session.objects.filter(pk=session.pk).exists()
    root.post(changelist, {"action": "release_sessions", "_selected_action": [session.pk]})
    assert retention_sweep(now=timezone.now() + LATER)["deleted"]["sessions"] == 1
