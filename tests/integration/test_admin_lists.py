"""The admin's lists and pages read as a person expects: the turn list showed hex ids without
what was asked (and its right-hand columns were cut off: tests/browser/test_admin_times.py
measures them); the session list showed keys only, the session page ``Title: -`` where the chat
shows "order mugs"; the inbox header read "0 approval inbox"; the timeline "asked for an answer
answered"; the schedule edit page was titled ``sessions_app.proactive.schedules.fire``; staff
search showed subagents' internal keys; the Notifications page was linked from nowhere; the
dashboard's counts had no thousands separators and two "turns" columns that disagreed."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from agents_app.models import AgentSchedule
from sessions_app import models as m
from sessions_app import services
from tests.integration.test_admin_inbox import client_for, parked, q2_sync, users  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_turn_and_session_lists_say_what_was_asked(q2_sync, users):
    services.turn_start(agent="ops", key="mugs", text="order mugs", user=users["alice"])
    staff = client_for(users["sam"])
    turns = staff.get(reverse("admin:sessions_app_turn_changelist")).content.decode()
    assert "order mugs" in turns
    header = re.search(r"<thead>(.*?)</thead>", turns, re.S)[1]
    assert header.count("<th") <= 8, header  # action checkbox + 7 columns
    sessions = staff.get(reverse("admin:sessions_app_session_changelist")).content.decode()
    assert '<td class="field-title_shown">order mugs</td>' in sessions
    session = m.Session.objects.get(key="mugs")
    page = staff.get(reverse("admin:sessions_app_session_change", args=[session.pk])).content.decode()
    assert re.search(r"Title:</label>\s*<div class=\"readonly\">order mugs</div>", page)


def test_inbox_header_timeline_words_and_links(parked, users):
    olga = client_for(users["olga"])
    inbox = olga.get(reverse("admin:sessions_app_approvalrequest_changelist")).content.decode()
    assert not re.search(r"\d+ approval inbox", inbox) and re.search(r"\b1 approval request\b", inbox)
    services.turn_resume(
        turn_id=parked.pk,
        input_id="approve-refund",
        answer=True,
        user=users["olga"],
        via="admin",
        check_session_access=False,
    )
    page = client_for(users["sam"]).get(reverse("admin:sessions_app_turn_change", args=[parked.pk])).content.decode()
    assert "asked for an answer" not in page
    assert '<b>question</b> <span class="june-state">answered</span>' in page
    index = client_for(users["sam"]).get(reverse("admin:index")).content.decode()
    assert reverse("admin:sessions_app_notification_changelist") in index
    board = client_for(users["sam"]).get(reverse("june-dashboard")).content.decode()
    assert reverse("admin:sessions_app_notification_changelist") in board


def test_schedule_page_is_titled_by_its_name():
    from django.contrib.auth import get_user_model

    admin_user = get_user_model().objects.create_user("root", password="pw", is_staff=True, is_superuser=True)
    with override_settings(JUNE_EMBEDDED=True):
        call_command("june_demo", stdout=io.StringIO())
    call_command("june_sync_schedules", stdout=io.StringIO())
    schedule = AgentSchedule.objects.get(name__endswith=":daily-summary")
    page = client_for(admin_user).get(reverse("admin:agents_app_agentschedule_change", args=[schedule.pk]))
    html = page.content.decode()
    assert (
        "sessions_app.proactive.schedules.fire |" not in html and schedule.name in re.search(r"<h2>(.*?)</h2>", html)[1]
    )


def test_dashboard_counts_have_thousands_separators(q2_sync, users):
    rec = services.turn_start(agent="ops", key="big", text="hello", user=users["alice"])
    m.Turn.objects.filter(pk=rec.turn_id).update(usage={"input_tokens": 1234567, "output_tokens": 8901})
    board = client_for(users["sam"]).get(reverse("june-dashboard")).content.decode()
    assert "1,234,567" in board
    assert "turns, with subagents" in board and "turns they started today" in board


def test_a_subagents_session_is_named_by_the_session_it_works_for():
    from django.utils import timezone

    from sessions_app.admin.search_admin import hit_label
    from sessions_app.search import Hit

    parent_session = m.Session.objects.create(agent="ops", key="s1")
    parent = m.Turn.objects.create(id="p" * 32, session=parent_session)
    child_session = m.Session.objects.create(agent="researcher", key=f"sub:{parent.pk}:call1:0")
    m.Turn.objects.create(id="c" * 32, session=child_session, parent=parent, kind="child")
    hit = Hit(child_session, 0, 1, "assistant", "c" * 32, timezone.now(), "tides")
    assert hit_label(hit) == "researcher, a subagent of ops/s1"
    assert hit_label(Hit(parent_session, 0, 0, "user", None, timezone.now(), "x")) == "ops/s1#g0"
