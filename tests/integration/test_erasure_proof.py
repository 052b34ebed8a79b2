"""Erasing a user leaves nothing of theirs: two users fill every June table (every kind of row,
a canary string in their texts, keys and files), one is erased, then every column of every
table of June's apps and every file in the storage is scanned for the erased user's id, canary
and turn ids: nothing; the other user's rows are all still there. Runs on SQLite and PostgreSQL.

Also: the erasure refuses while the user has an unfinished turn (nothing deleted), or cancels
it first when asked; ``manage.py june erase-user`` reports what it deleted."""

from __future__ import annotations

import json
import os
import struct
import zlib
from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from agents_app.models import Attachment, ScheduleRun, WebhookDelivery
from sessions_app import attachment_services, erasure, privacy, services, takeover
from sessions_app import models as m
from sessions_app.audit import audit_staff_read
from sessions_app.notify.outbox import notify_parks
from sessions_app.site_errors import UserBusy
from tests.attachment_files import png

pytestmark = pytest.mark.django_db(transaction=True)

#: tables that hold nobody's data: no fill can put a user's there (workers' heartbeats, webhook
#: signatures, the usage totals of deleted turns: an agent and a day)
NOBODYS = {"sessions_app_workerbeat", "agents_app_seenwebhook", "sessions_app_usagetotal"}
#: the audit log keeps bare ids of the rows an action touched (the rows themselves are gone)
#: and the subject as a keyed digest; its text columns are scanned like every other table's
AUDIT_REFERENCES = {("sessions_app_auditevent", c) for c in ("session_id", "generation", "turn_id", "attachment_id")}


@pytest.fixture
def q2_sync(monkeypatch, settings, tmp_path):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)
    settings.JUNE_DEMO_DELAY = 0.0
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


def png_with(text: str) -> bytes:
    """A valid PNG carrying ``text`` in a tEXt chunk (the canary in a file's bytes)."""
    data = png()
    chunk = b"tEXt" + b"Comment\x00" + text.encode()
    body = struct.pack(">I", len(chunk) - 4) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return data[:-12] + body + data[-12:]


def make_person(name: str, number: int):
    User = get_user_model()
    extra = {"pk": number} if User._meta.pk.get_internal_type() in ("AutoField", "BigAutoField") else {}
    return User.objects.create_user(name, password=f"pw-{number}", email=f"{name}@example.com", **extra)


def fill(user, canary: str, staff) -> None:
    """Every kind of row June keeps about ``user``, each holding ``canary`` where it holds text
    (``staff``: the operator who answers, takes over, reads)."""
    key = f"{canary}-main"
    services.turn_start(agent="ops", key=key, text=f"order 2 {canary}", user=user)
    rec = services.turn_start(agent="ops", key=key, text="refund order 42 10", user=user)
    parked = m.Turn.objects.get(pk=rec.turn_id)
    assert parked.status == "suspended", parked.error
    notify_parks()  # the outbox rows about the parked request
    services.turn_resume(
        turn_id=parked.pk,
        input_id=parked.pending["request"]["id"],
        answer=True,
        user=staff,
        via="admin",
        check_session_access=False,
    )
    upload = attachment_services.attachment_upload(
        agent="ops", key=key, user=user, upload=SimpleUploadedFile(f"{canary}.png", png_with(canary), "image/png")
    )
    services.turn_start(agent="ops", key=key, text=f"look {canary}", user=user, attachments=[upload.id])
    attachment_services.attachment_upload(  # an upload never sent
        agent="ops", key=key, user=user, upload=SimpleUploadedFile(f"{canary}-2.png", png_with(canary), "image/png")
    )
    services.session_reset(agent="ops", key=key, user=user)
    services.turn_start(agent="ops", key=key, text=f"hello {canary}", user=user)
    first = m.Message.objects.filter(session__key=key, role="user").order_by("-generation", "index").first()
    services.branch_fork(agent="ops", key=key, at=first.index, text=f"edited {canary}", user=user)
    # a subagent: its child session is the user's too
    from tests.integration.test_subagents_stream import run_tree

    async_to_sync(run_tree)(user, f"{canary}-research", f"research {canary} tides")
    turn = m.Turn.objects.filter(session__key=key).first()
    ScheduleRun.objects.create(
        schedule=f"june:ops:{canary}", agent="ops", tick=timezone.now(), session_key=key, turn_id=turn.pk[:31] + "s"
    )
    WebhookDelivery.objects.create(agent="ops", session_key=key, turn_id=turn.pk, url=f"https://example.com/{canary}")
    # a model call of a turn that batches (docs/providers.md): the request holds the conversation
    m.BatchCall.objects.create(
        custom_id=f"{turn.pk}-1",
        key=f"{turn.pk}:model:1",
        turn=turn,
        agent="ops",
        params={"messages": [{"role": "user", "content": f"order 2 {canary}"}]},
        created_at=0.0,
    )
    m.ApiToken.issue(user, name=canary)
    m.QuotaOverride.objects.create(user=user, note=canary, tokens_per_day=10)
    m.RateCounter.objects.get_or_create(scope="user", subject=str(user.pk), window_start=0, defaults={"n": 1})
    session = m.Session.objects.get(key=key)
    # a person took the conversation over, the user and they talked, it was handed back
    takeover.takeover_begin(session=session, user=staff)
    takeover.user_says(session=session, user=user, text=f"a person please {canary}")
    takeover.person_says(session=session, user=staff, text=f"here I am {canary}")
    takeover.takeover_end(session=session, user=staff)
    audit_staff_read(request=None, user=staff, action=m.AuditAction.TURN_READ, session=session, turn_id=turn.pk)


def cell_text(value) -> str:
    if isinstance(value, memoryview | bytes):
        raw = bytes(value)
        return raw.hex() + " " + raw.decode("latin-1")
    return str(value)


def june_tables():
    for label in ("sessions_app", "agents_app"):
        for model in apps.get_app_config(label).get_models():
            if not model._meta.proxy and model._meta.managed:
                yield model._meta.db_table, [f.column for f in model._meta.concrete_fields]


def q2_texts() -> dict[str, list[str]]:
    """django-q2's tables as text (their args, results and queued packages are pickles: read
    through django-q2's own models)."""
    from django_q.models import OrmQ, Schedule, Task

    return {
        "django_q_task": [f"{t.name} {t.func} {t.args!r} {t.kwargs!r} {t.result!r}" for t in Task.objects.all()],
        "django_q_ormq": [repr(q.task) for q in OrmQ.objects.all()],
        "django_q_schedule": [f"{s.name} {s.func} {s.args} {s.kwargs}" for s in Schedule.objects.all()],
    }


def queue_turn_task(turn_id: str) -> None:
    """A queued (not run) django-q2 package for ``turn_id``, as a sweeper's re-enqueue leaves
    one for a turn that settled meanwhile."""
    from django_q.tasks import async_task

    from sessions_app.outbox.queue import RUN_TURN

    async_task(RUN_TURN, turn_id, task_name=f"turn {turn_id}", group="june.turns", sync=False)


def session_columns() -> set[tuple[str, str]]:
    """(table, column) of every foreign key to a session: a row there is the session's."""
    return {
        (model._meta.db_table, f.column)
        for label in ("sessions_app", "agents_app")
        for model in apps.get_app_config(label).get_models()
        for f in model._meta.concrete_fields
        if f.is_relation and f.related_model is m.Session
    }


def mentions(needles: list[str], sessions: frozenset[int] = frozenset()) -> dict[str, list[str]]:
    """table -> the columns (and the needle) where any of ``needles`` occurs, or that point
    at one of ``sessions``."""
    found: dict[str, list[str]] = {}
    q = connection.ops.quote_name
    keyed = session_columns()
    with connection.cursor() as cursor:
        for table, columns in june_tables():
            cursor.execute(f"SELECT {', '.join(q(c) for c in columns)} FROM {q(table)}")
            for row in cursor.fetchall():
                for column, value in zip(columns, row):
                    if value is None:
                        continue
                    if (table, column) in keyed and value in sessions:
                        found.setdefault(table, []).append(f"{column}: session {value}")
                    text = cell_text(value)
                    for needle in needles:
                        if needle in text and (table, column) not in AUDIT_REFERENCES:
                            found.setdefault(table, []).append(f"{column}: {needle}")
    for table, texts in q2_texts().items():
        for text in texts:
            found.setdefault(table, []).extend(f"row: {needle}" for needle in needles if needle in text)
        if not found.get(table):
            found.pop(table, None)
    return found


def stored_files(root) -> dict[str, bytes]:
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                out[path] = fh.read()
    return out


def footprint(user) -> dict[str, int]:
    sessions = m.Session.objects.filter(owner=user)
    return {
        "sessions": sessions.count(),
        "turns": m.Turn.objects.filter(session__in=sessions).count(),
        "messages": m.Message.objects.filter(session__in=sessions).count(),
        "events": m.Event.objects.filter(session__in=sessions).count(),
        "tokens": m.ApiToken.objects.filter(user=user).count(),
    }


def make_operator(name: str = "olga", number: int = 987654300):
    staff = make_person(name, number)
    get_user_model().objects.filter(pk=staff.pk).update(is_staff=True)
    staff.refresh_from_db()
    staff.groups.add(Group.objects.get_or_create(name="operators")[0])
    return staff


def test_erasing_a_user_leaves_nothing_of_theirs_and_keeps_the_other_users_data(q2_sync, settings):
    settings.JUNE_Q_SAVE_TURNS = True  # django-q2 keeps a result row per turn task too
    staff = make_operator()
    erin = make_person("erin-c4n4ry", 987654321)
    kept = make_person("kate-k33pme", 987654322)
    fill(erin, "c4n4ry", staff)
    fill(kept, "k33pme", staff)
    for user in (erin, kept):
        queue_turn_task(m.Turn.objects.filter(session__owner=user).first().pk)
    erin_id = str(erin.pk)
    erin_turns = list(m.Turn.objects.filter(session__owner=erin).values_list("pk", flat=True))
    erin_attachments = list(Attachment.objects.filter(owner_id=erin.pk).values_list("pk", flat=True))
    assert len(erin_turns) >= 5 and m.Session.objects.filter(owner=erin, key__startswith="sub:").exists()
    needles = ["c4n4ry", erin_id, *erin_turns, *erin_attachments]
    erin_sessions = frozenset(m.Session.objects.filter(owner=erin).values_list("pk", flat=True))

    # the fill reached every table that can hold a user's data (the audit log: by her digest)
    before = mentions([*needles, m.subject_of(erin.pk)], erin_sessions)
    holding = {table for table, _ in june_tables()} - NOBODYS | {"django_q_task", "django_q_ormq"}
    assert holding - set(before) == set(), f"tables the fill did not reach: {sorted(holding - set(before))}"
    kept_before = footprint(kept)
    kept_mentions = mentions(["k33pme"])
    files_before = stored_files(q2_sync)
    assert any(b"c4n4ry" in data for data in files_before.values())

    report = privacy.user_erase(user=erin, actor=staff)

    assert report["sessions"] >= 3 and report["attachments"] == 2 and report["api_tokens"] == 1, report
    assert mentions(needles, erin_sessions) == {}
    assert not any(b"c4n4ry" in data for data in stored_files(q2_sync).values())
    # the other user's data: every row and every file still there
    assert footprint(kept) == kept_before
    assert mentions(["k33pme"]) == kept_mentions
    assert sum(b"k33pme" in data for data in stored_files(q2_sync).values()) == 2
    # the erasure itself is in the audit log, naming erin only by her digest
    (row,) = m.AuditEvent.objects.filter(action=m.AuditAction.ERASE)
    assert row.subject == m.subject_of(erin.pk) and row.actor == "olga" and row.detail["deleted"] == report


def test_erasing_an_operator_leaves_their_name_in_no_other_users_session(q2_sync):
    """Olga took two users' sessions over and answered their requests: erased, her name, id and
    address are in no June table but the audit log (what she read and did stays on record);
    the users' conversations keep every row, her part said by "an operator (erased)"."""
    staff = make_operator()
    erin, kate = make_person("erin-c4n4ry", 987654321), make_person("kate-k33pme", 987654322)
    fill(erin, "c4n4ry", staff)
    fill(kate, "k33pme", staff)
    needles = ["olga", str(staff.pk)]
    before = mentions(needles)
    assert {"sessions_app_event", "sessions_app_message", "sessions_app_takeover"} <= set(before), before
    footprints = footprint(erin), footprint(kate)

    report = privacy.user_erase(user=staff)

    assert report["names_erased"] >= 10 and report["links_cleared"] >= 2, report
    left = mentions(needles)
    assert set(left) <= {"sessions_app_auditevent"}, left
    assert (footprint(erin), footprint(kate)) == footprints
    session = m.Session.objects.get(key="k33pme-main")
    said = {e.type: e.data for e in m.Event.objects.filter(session=session, type__in=erasure.TAKEOVER_EVENTS)}
    assert said["takeover.started"]["by"] == m.ERASED_NAME and said["person.message"]["by"] == m.ERASED_NAME
    answered = m.Event.objects.filter(session=session, type="input.answered").first().data
    assert answered["name"] == m.ERASED_NAME and answered["by"] is None
    notes = m.Message.objects.filter(session=session, role="trigger").values_list("data", flat=True)
    assert any(f"A person, {m.ERASED_NAME}, took over" in d["text"] for d in notes), list(notes)
    assert m.Takeover.objects.get(session=session).operator_name == m.ERASED_NAME


def test_erasure_refuses_while_a_turn_is_unfinished_or_cancels_it_first(q2_sync):
    erin = make_person("erin", 987654331)
    rec = services.turn_start(agent="ops", key="r1", text="refund order 42 10", user=erin)
    assert m.Turn.objects.get(pk=rec.turn_id).status == "suspended"
    with pytest.raises(UserBusy):
        privacy.user_erase(user=erin)
    assert m.Session.objects.filter(owner=erin).count() == 1 and m.Turn.objects.count() == 1
    # the refusal names the option that cancels them (it said "or erase with cancel")
    with pytest.raises(CommandError, match="unfinished: .*erase-user --cancel"):
        call_command("june", "erase-user", "erin")
    report = privacy.user_erase(user=erin, cancel=True)
    assert report["turns"] == 1 and not m.Session.objects.exists()
    assert m.AuditEvent.objects.get(action=m.AuditAction.ERASE).detail["cancelled"] == 1


def test_the_command_erases_and_reports_what_it_deleted(q2_sync):
    erin = make_person("erin", 987654341)
    services.turn_start(agent="ops", key="s1", text="hello", user=erin)
    out = StringIO()
    call_command("june", "erase-user", "erin", "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["user_id"] == str(erin.pk) and body["deleted"]["sessions"] == 1 and body["deleted"]["messages"] >= 2
    assert not m.Session.objects.exists()
    with pytest.raises(CommandError, match="no user"):
        call_command("june", "erase-user", "nobody")


def test_a_deletion_cut_short_is_finished_by_the_next_pass(q2_sync):
    """A crash after the claim leaves the session under its ``~erasing:`` key, its old key in the
    title: the next pass finds it and deletes it with its attachments."""
    from collections import Counter

    from sessions_app import erasure

    erin = make_person("erin", 987654351)
    att = attachment_services.attachment_upload(
        agent="ops", key="s1", user=erin, upload=SimpleUploadedFile("a.png", png(), "image/png")
    )
    services.turn_start(agent="ops", key="s1", text="look", user=erin, attachments=[att.id])
    session = m.Session.objects.get(key="s1")
    assert erasure.session_claim(session.pk) == ("ops", "s1")
    session.refresh_from_db()
    assert session.key.startswith("~erasing:") and session.title == "s1"
    counts: Counter = Counter()
    assert erasure.sessions_resume_deleting(counts=counts) == 1
    assert counts["attachments"] == 1 and not m.Session.objects.exists() and not Attachment.objects.exists()


def test_a_superuser_erases_the_owners_of_chosen_sessions_from_the_admin(q2_sync):
    from django.test import Client
    from django.urls import reverse

    erin, kate = make_person("erin", 987654361), make_person("kate", 987654362)
    services.turn_start(agent="ops", key="e1", text="hello", user=erin)
    services.turn_start(agent="ops", key="k1", text="hello", user=kate)
    root = get_user_model().objects.create_superuser("root", password="pw-root-123")
    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True)
    changelist = reverse("admin:sessions_app_session_changelist")
    chosen = {"action": "erase_owners", "_selected_action": [m.Session.objects.get(key="e1").pk]}

    sam = Client()
    sam.force_login(staff)
    assert "erase_owners" not in sam.get(changelist).content.decode()
    sam.post(changelist, {**chosen, "confirmed": "yes"})
    assert m.Session.objects.count() == 2  # staff cannot

    su = Client()
    su.force_login(root)
    assert "erase_owners" in su.get(changelist).content.decode()
    confirm = su.post(changelist, chosen)
    assert (
        confirm.status_code == 200
        and "Erase these users" in confirm.content.decode()
        and "erin" in confirm.content.decode()
    )
    assert m.Session.objects.count() == 2  # nothing before the confirmation
    done = su.post(changelist, {**chosen, "confirmed": "yes"}, follow=True)
    assert "Erased the data of erin" in done.content.decode()
    assert list(m.Session.objects.values_list("key", flat=True)) == ["k1"]
    assert m.AuditEvent.objects.get(action=m.AuditAction.ERASE).actor == "root"
