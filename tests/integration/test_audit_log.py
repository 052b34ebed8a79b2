"""The audit log: a row for each staff read of another user's data (a session, an archived
generation, a turn, an attachment, an export), each staff search, each answer; none for a staff
member's own session; superusers browse and export it; nobody edits it, in the admin or (on
PostgreSQL) in the database; its own retention."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents_app.models import Attachment
from sessions_app import models as m
from sessions_app import services
from sessions_app.audit import audit_purge, audit_record
from sessions_app.models import AuditAction, AuditEvent, subject_of
from tests.attachment_files import png

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def q2_sync(monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


@pytest.fixture
def people():
    make = get_user_model().objects.create_user
    operators = Group.objects.create(name="operators")
    olga = make("olga", password="pw-olga-123", is_staff=True)
    olga.groups.add(operators)
    return {
        "alice": make("alice", password="pw-alice-123"),
        "olga": olga,
        "root": get_user_model().objects.create_superuser("root", password="pw-root-123"),
    }


def as_user(user) -> Client:
    client = Client(REMOTE_ADDR="203.0.113.7")
    client.force_login(user)
    return client


def rows(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_staff_reads_of_another_users_data_are_recorded_with_who_what_and_where(q2_sync, people):
    alice, olga = people["alice"], people["olga"]
    services.turn_start(agent="ops", key="s1", text="order blue mugs", user=alice)
    services.session_reset(agent="ops", key="s1", user=alice)
    session = m.Session.objects.get(key="s1")
    turn = m.Turn.objects.filter(session=session).first()
    staff = as_user(olga)

    assert staff.get(reverse("admin:sessions_app_session_change", args=[session.pk])).status_code == 200
    assert staff.get(reverse("admin:sessions_app_session_generation", args=[session.pk, 0])).status_code == 200
    assert staff.get(reverse("admin:sessions_app_turn_change", args=[turn.pk])).status_code == 200
    url = reverse("admin:sessions_app_session_export_md", args=[session.pk, 0])
    assert staff.get(url).status_code == 200
    assert staff.get(reverse("admin:sessions_app_session_search") + "?q=mugs").status_code == 200

    (read,) = rows(AuditAction.SESSION_READ)
    assert (read.actor, read.actor_id, read.session_id, read.remote_addr) == (
        "olga",
        str(olga.pk),
        session.pk,
        "203.0.113.7",
    )
    assert read.subject == subject_of(alice.pk)
    (archive,) = rows(AuditAction.ARCHIVE_READ)
    assert (archive.generation, archive.session_id) == (0, session.pk)
    (turn_read,) = rows(AuditAction.TURN_READ)
    assert turn_read.turn_id == turn.pk
    (export,) = rows(AuditAction.EXPORT_READ)
    assert export.generation == 0
    (search,) = rows(AuditAction.SEARCH)
    assert search.detail["query"] == "mugs" and search.detail["hits"] >= 1 and search.subject == ""


def test_the_dashboard_and_the_inbox_record_the_sessions_they_show_a_staff_user(q2_sync, people):
    """The dashboard lists what users wrote (parked requests, turns), the inbox what they asked,
    its answer page one request, the past answers page answered ones: each records which of
    another user's sessions it showed whom. The dashboard re-reads itself every few seconds:
    a session it shows is recorded once in ``LIST_QUIET_SECONDS`` per reader."""
    alice, olga = people["alice"], people["olga"]
    rec = services.turn_start(agent="ops", key="p1", text="refund order 42 10", user=alice)
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    services.turn_start(agent="ops", key="mine", text="refund order 43 10", user=olga)  # her own: no row
    session = turn.session
    staff = as_user(olga)
    dashboard = reverse("admin:sessions_app_approvalrequest_dashboard")

    assert staff.get(dashboard).status_code == 200
    assert staff.get(dashboard + "?fragment=1").status_code == 200
    (seen,) = rows(AuditAction.DASHBOARD_READ)
    assert (seen.actor, seen.session_id, seen.subject, seen.remote_addr) == (
        "olga",
        session.pk,
        subject_of(alice.pk),
        "203.0.113.7",
    )
    assert seen.detail["turns"] == [turn.pk]

    inbox = staff.get(reverse("admin:sessions_app_approvalrequest_changelist"))
    assert inbox.status_code == 200 and "refund" in inbox.content.decode()
    (listed,) = rows(AuditAction.INBOX_READ)
    assert (listed.session_id, listed.detail["turns"]) == (session.pk, [turn.pk])
    answer_page = reverse("admin:sessions_app_approvalrequest_change", args=[turn.pk])
    assert staff.get(answer_page).status_code == 200
    (read,) = rows(AuditAction.TURN_READ)
    assert (read.turn_id, read.session_id, read.subject) == (turn.pk, session.pk, subject_of(alice.pk))
    # another reader's are theirs (olga's own session is another user's to root)
    assert as_user(people["root"]).get(dashboard).status_code == 200
    by_root = {r.session_id: r.subject for r in rows(AuditAction.DASHBOARD_READ) if r.actor == "root"}
    assert by_root == {session.pk: subject_of(alice.pk), m.Session.objects.get(key="mine").pk: subject_of(olga.pk)}


def test_a_staff_members_own_session_is_not_audited(q2_sync, people):
    olga = people["olga"]
    services.turn_start(agent="ops", key="mine", text="hello", user=olga)
    session = m.Session.objects.get(key="mine")
    assert as_user(olga).get(reverse("admin:sessions_app_session_change", args=[session.pk])).status_code == 200
    assert not AuditEvent.objects.exists()


def test_staff_downloading_another_users_attachment_is_recorded_and_the_owner_is_not(q2_sync, people):
    alice, olga = people["alice"], people["olga"]
    owner = as_user(alice)
    services.turn_start(agent="ops", key="f1", text="hello", user=alice)
    up = owner.post(
        "/api/agents/ops/sessions/f1/attachments", {"file": SimpleUploadedFile("dot.png", png(), "image/png")}
    )
    assert up.status_code == 201, up.content
    att = Attachment.objects.get()
    url = f"/api/agents/ops/sessions/f1/attachments/{att.id}"
    assert owner.get(url).status_code == 200
    assert not rows(AuditAction.ATTACHMENT_READ)
    assert as_user(olga).get(url).status_code == 200
    (row,) = rows(AuditAction.ATTACHMENT_READ)
    assert (row.attachment_id, row.actor, row.subject) == (att.id, "olga", subject_of(alice.pk))


def test_every_answer_is_recorded_in_its_own_transaction(q2_sync, people):
    alice, olga = people["alice"], people["olga"]
    rec = services.turn_start(agent="ops", key="r1", text="refund order 42 10", user=alice)
    turn = m.Turn.objects.get(pk=rec.turn_id)
    assert turn.status == "suspended", turn.error
    input_id = turn.pending["request"]["id"]
    services.turn_resume(
        turn_id=turn.pk,
        input_id=input_id,
        answer=True,
        user=olga,
        via="admin",
        remote_addr="198.51.100.2",
        check_session_access=False,
    )
    (row,) = rows(AuditAction.ANSWER)
    assert (row.actor_id, row.turn_id, row.remote_addr) == (str(olga.pk), turn.pk, "198.51.100.2")
    assert row.detail == {"input_id": input_id, "via": "admin"} and row.subject == subject_of(alice.pk)


def test_superusers_browse_and_export_the_log_and_nobody_edits_it_in_the_admin(people):
    alice, olga, root = people["alice"], people["olga"], people["root"]
    audit_record(action=AuditAction.SEARCH, user=olga, detail={"query": "=cmd|' /C calc'!A0", "hits": 0})
    audit_record(action=AuditAction.SESSION_READ, user=olga, owner_id=alice.pk)
    changelist = reverse("admin:sessions_app_auditevent_changelist")
    assert as_user(olga).get(changelist).status_code == 403  # staff, not superuser
    su = as_user(root)
    page = su.get(changelist)
    assert page.status_code == 200 and "Export CSV" in page.content.decode()
    # the search box takes a username: the rows about that user
    assert su.get(changelist + "?q=alice").status_code == 200
    by_name = su.get(reverse("admin:sessions_app_auditevent_export") + "?q=alice")
    found = list(csv.reader(io.StringIO(b"".join(by_name.streaming_content).decode())))
    assert [r[2] for r in found[1:]] == ["session.read"]
    row = AuditEvent.objects.first()
    assert su.get(reverse("admin:sessions_app_auditevent_change", args=[row.pk])).status_code == 200
    assert su.post(reverse("admin:sessions_app_auditevent_change", args=[row.pk]), {"actor": "x"}).status_code == 403
    assert su.post(reverse("admin:sessions_app_auditevent_delete", args=[row.pk]), {"post": "yes"}).status_code == 403
    assert su.get(reverse("admin:sessions_app_auditevent_add")).status_code == 403
    assert AuditEvent.objects.count() == 2 and AuditEvent.objects.filter(actor="x").count() == 0

    export = su.get(reverse("admin:sessions_app_auditevent_export") + "?action__exact=search")
    assert export.status_code == 200 and export["Content-Disposition"].startswith("attachment")
    lines = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert lines[0][:3] == ["id", "at", "action"] and len(lines) == 2
    assert lines[1][2] == "search" and "'{" not in lines[1][-1]
    assert as_user(olga).get(reverse("admin:sessions_app_auditevent_export")).status_code == 403


def test_the_audit_logs_own_retention_deletes_only_old_rows(people, settings):
    """A clock moved forward: rows older than JUNE_AUDIT_RETENTION_DAYS go, newer stay, the
    purge records itself; 0 keeps everything."""
    settings.JUNE_AUDIT_RETENTION_DAYS = 0
    old = AuditEvent.objects.create(action=AuditAction.SEARCH, at=timezone.now() - dt.timedelta(days=40))
    assert audit_purge() == 0
    settings.JUNE_AUDIT_RETENTION_DAYS = 30
    recent = audit_record(action=AuditAction.SEARCH, user=people["olga"])
    assert audit_purge() >= 1
    assert not AuditEvent.objects.filter(pk=old.pk).exists() and AuditEvent.objects.filter(pk=recent.pk).exists()
    assert rows(AuditAction.AUDIT_PURGE)[0].detail["deleted"] >= 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgresql_refuses_an_update_or_a_delete_of_an_audit_row(people):
    row = audit_record(action=AuditAction.SEARCH, user=people["olga"])
    for attempt in (
        lambda: AuditEvent.objects.filter(pk=row.pk).update(actor="mallory"),
        lambda: AuditEvent.objects.filter(pk=row.pk).delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic():
                attempt()
    with connection.cursor() as cursor, pytest.raises(DatabaseError, match="append-only"):
        with transaction.atomic():
            # the purge's setting allows only rows older than its cutoff
            cursor.execute("SELECT set_config('june.audit_purge_before', '2000-01-01', true)")
            cursor.execute("DELETE FROM sessions_app_auditevent WHERE id = %s", [row.pk])
    assert AuditEvent.objects.get(pk=row.pk).actor == "olga"
