"""Every time a person reads carries its zone, in one format (``templatetags/june_time``; the
browser's half, ``static/june/time.js``, is tested in tests/browser/test_schedules_admin.py).
Turn lists, timelines and the past-answers page showed UTC without a label in three formats;
schedule runs read "TICK 8 a.m."; a Run now was listed by its cron tick, not when it ran."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth import get_user_model
from django.template import Context, Template
from django.test import Client, override_settings
from django.utils import timezone

from agents_app.models import ScheduleRun
from sessions_app.times import time_text

pytestmark = pytest.mark.django_db(transaction=True)

AT = dt.datetime(2026, 12, 6, 8, 0, 5, 250_000, tzinfo=dt.UTC)
FORMAT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3})? [A-Za-z_/+-]+")


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_the_format_is_the_site_zones_with_its_name():
    assert time_text(AT) == "2026-12-06 13:30:05 Asia/Kolkata"
    assert time_text(AT, ms=True) == "2026-12-06 13:30:05.250 Asia/Kolkata"
    html = Template("{% load june_time %}{{ at|june_time }}").render(Context({"at": AT}))
    assert html == (
        '<time datetime="2026-12-06T08:00:05.250000+00:00" data-june-time="">2026-12-06 13:30:05 Asia/Kolkata</time>'
    )
    with timezone.override("Europe/Paris"):  # a zone a host's middleware activated for its reader
        assert time_text(AT) == "2026-12-06 09:00:05 Europe/Paris"
    assert time_text(None) == "—"


@override_settings(TIME_ZONE="Europe/Paris")
def test_admin_lists_show_times_in_the_one_format():
    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True, is_superuser=True)
    ScheduleRun.objects.create(
        schedule="june:ops:daily-summary", agent="ops", tick=AT, session_key="k", turn_id="t" * 32
    )
    web = Client()
    web.force_login(staff)
    html = web.get("/admin/agents_app/schedulerun/").content.decode()
    assert "2026-12-06 09:00:05 Europe/Paris" in html  # the tick
    assert " a.m." not in html and " p.m." not in html
    cells = re.findall(r'<td class="field-(?:tick|fired_at)">(.*?)</td>', html)
    assert cells and all(FORMAT.search(c) for c in cells), cells


@override_settings(TIME_ZONE="Europe/Paris")
def test_change_pages_the_audit_log_and_takeover_lines_show_the_one_format(monkeypatch):
    """A turn's read-only created_at on its admin page, the audit log's list and its row's page,
    and the session page's earlier takeovers: each time in the one format, with its zone, not
    Django's ("Dec. 6, 2026, 9 a.m.")."""
    from django_q.conf import Conf

    from sessions_app import models as m
    from sessions_app import services, takeover

    monkeypatch.setattr(Conf, "SYNC", True)
    root = get_user_model().objects.create_superuser("root", password="pw-root-123")
    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    rec = services.turn_start(agent="ops", key="t1", text="hello", user=alice)
    m.Turn.objects.filter(pk=rec.turn_id).update(created_at=AT)
    session = m.Session.objects.get(key="t1")
    # root is in no operators group: the agent's grant is stubbed; the takeover is placed at AT
    monkeypatch.setattr(takeover, "may_take_over", lambda *, session, user: True)
    takeover.takeover_begin(session=session, user=root)
    takeover.takeover_end(session=session, user=root)
    m.Takeover.objects.update(started_at=AT, ended_at=AT + dt.timedelta(minutes=5))
    web = Client()
    web.force_login(root)

    turn_page = web.get(f"/admin/sessions_app/turn/{rec.turn_id}/change/").content.decode()
    assert "2026-12-06 09:00:05 Europe/Paris" in turn_page, "the turn's created_at"
    audit = web.get("/admin/sessions_app/auditevent/").content.decode()
    cells = re.findall(r'<(?:td|th) class="field-at">(.*?)</(?:td|th)>', audit, re.S)
    assert cells and all(FORMAT.search(c) for c in cells), cells
    row = m.AuditEvent.objects.first()
    assert FORMAT.search(web.get(f"/admin/sessions_app/auditevent/{row.pk}/change/").content.decode())
    session_page = web.get(f"/admin/sessions_app/session/{session.pk}/change/").content.decode()
    earlier = re.search(r'class="june-takeovers-before">(.*?)</p>', session_page, re.S).group(1)
    assert "2026-12-06 09:00:05 Europe/Paris" in earlier, earlier
    token_row, _ = m.ApiToken.issue(alice, name="ci")
    m.ApiToken.objects.filter(pk=token_row.pk).update(created_at=AT)
    token_page = web.get(f"/admin/sessions_app/apitoken/{token_row.pk}/change/").content.decode()
    assert "2026-12-06 09:00:05 Europe/Paris" in token_page, "a token's created_at (its admin overrides the fields)"
    for page in (turn_page, audit, session_page, token_page):
        assert " a.m." not in page and " p.m." not in page


@override_settings(TIME_ZONE="Europe/Paris")
def test_the_evals_lists_show_the_one_format():
    from june_evals.models import Dataset, EvalRun

    root = get_user_model().objects.create_superuser("root", password="pw-root-123")
    dataset = Dataset.objects.create(name="refunds")
    run = EvalRun.objects.create(dataset=dataset, finished_at=AT)
    Dataset.objects.filter(pk=dataset.pk).update(created_at=AT)
    EvalRun.objects.filter(pk=run.pk).update(created_at=AT)
    web = Client()
    web.force_login(root)
    for page in ("/admin/june_evals/dataset/", "/admin/june_evals/evalrun/"):
        html = web.get(page).content.decode()
        cells = re.findall(r'<td class="field-(?:created_at|finished_at)">(.*?)</td>', html)
        assert cells and all("2026-12-06 09:00:05 Europe/Paris" in c for c in cells), (page, cells)


@override_settings(TIME_ZONE="Europe/Paris")
def test_the_queue_s_own_admin_pages_show_the_one_format():
    """django-q2's pages (Scheduled tasks, Successful and Failed tasks, Queued tasks) showed
    "Dec. 6, 2026, 9 a.m." without a zone where the rest of the console shows its one format:
    June's admin takes them over with the same columns, the times in the format."""
    from django_q.models import Failure, OrmQ, Schedule, Success

    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True, is_superuser=True)
    done = dict(func="math.floor", args=None, kwargs=None, result=None, group="g", started=AT, stopped=AT)
    Success.objects.create(id="a" * 32, name="done", success=True, **done)
    Failure.objects.create(id="b" * 32, name="failed", success=False, **done)
    Schedule.objects.create(name="tick", func="math.floor", schedule_type=Schedule.HOURLY, next_run=AT)
    OrmQ.objects.create(key="june", payload="x", lock=AT)
    web = Client()
    web.force_login(staff)
    for url in (
        "/admin/django_q/success/",
        "/admin/django_q/failure/",
        "/admin/django_q/schedule/",
        "/admin/django_q/ormq/",
        f"/admin/django_q/success/{'a' * 32}/change/",
        f"/admin/django_q/failure/{'b' * 32}/change/",
    ):
        html = web.get(url).content.decode()
        assert "2026-12-06 09:00:05 Europe/Paris" in html, url
        assert " a.m." not in html and " p.m." not in html, url


@override_settings(TIME_ZONE="Europe/Paris")
def test_the_queue_s_edit_forms_name_the_zone_their_times_are_typed_in():
    """A schedule's change form (and an ORM task's) showed its ``next_run`` date and time inputs
    with no zone: a time typed there is read in the site's zone, which the form did not say."""
    from django_q.models import OrmQ, Schedule

    staff = get_user_model().objects.create_user("sam", password="pw-sam-123", is_staff=True, is_superuser=True)
    tick = Schedule.objects.create(name="tick", func="math.floor", schedule_type=Schedule.HOURLY, next_run=AT)
    web = Client()
    web.force_login(staff)
    for url in ("/admin/django_q/schedule/add/", f"/admin/django_q/schedule/{tick.pk}/change/"):
        html = web.get(url).content.decode()
        label = re.search(r'field-next_run">.*?<label[^>]*>(.*?)</label>', html, re.S)
        assert label and "(Europe/Paris)" in label.group(1), (url, label and label.group(0))
    assert 'value="09:00:05"' in html  # the change form's value is in that zone
    assert OrmQ  # its page has no editable time (the lock is read-only)


def test_a_session_active_under_a_minute_ago_reads_just_now():
    """The sessions list said "0 minutes ago" for a session just used."""
    from sessions_app import services

    alice = get_user_model().objects.create_user("alice", password="pw-alice-123")
    services.session_for_user(agent="ops", key="fresh", user=alice, create=True)
    client = Client()
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert "just now" in page and "0\xa0minutes ago" not in page and "0 minutes ago" not in page
    render = Template("{% load june_time %}{{ at|june_ago }}").render
    assert render(Context({"at": timezone.now() - dt.timedelta(minutes=3)})) == "3\xa0minutes ago"
