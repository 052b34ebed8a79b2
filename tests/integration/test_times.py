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
