"""The schedules admin (issue 40 item 0): times in the agent's zone with its label (the demo's
daily summary is declared in Europe/Paris; it showed UTC, unlabelled), and "Run now" as a
button in each row rather than hidden in the bulk-action menu."""

from __future__ import annotations

import io
import re


def test_schedule_times_are_in_the_agents_zone_and_run_now_is_a_row_button(june_server, new_page):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import override_settings
    from django.utils import timezone

    from agents_app.models import AgentSchedule

    with override_settings(JUNE_EMBEDDED=True):
        call_command("june_demo", stdout=io.StringIO())
    call_command("june_sync_schedules", stdout=io.StringIO())
    schedule = AgentSchedule.objects.get(name__endswith=":daily-summary")
    operator = get_user_model().objects.get(username="operator")
    page = new_page(operator)
    page.goto("/admin/agents_app/agentschedule/")
    row = page.locator("#result_list tbody tr", has_text="daily-summary")
    shown = row.locator("td.field-next_run_local").text_content()
    # cron 0 9 * * * in Paris, read in this browser's zone (UTC), labelled, in the one format
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 08:00:00 UTC", shown), shown
    assert row.locator("td.field-cron_zone").text_content() == "0 9 * * * (Europe/Paris)"

    before = timezone.now()
    row.locator("button.june-run-now").click()
    page.wait_for_selector(".messagelist >> text=1 schedule(s) due now")
    schedule.refresh_from_db()
    assert schedule.next_run >= before - timezone.timedelta(seconds=1)
    assert page.url.endswith("/admin/agents_app/agentschedule/")
    # a GET does nothing
    assert page.request.get(f"{page.url}{schedule.pk}/run-now/").status == 405


def test_every_time_reads_in_the_readers_zone_in_one_format(june_server, browser):
    """Times are in the reader's zone (a browser in Europe/Paris; the site's TIME_ZONE is UTC),
    labelled, in one format, from one helper (``june_time`` + ``static/june/time.js``): the
    dashboard's "Schedules due next" said 08:00:00 while the schedule list said 09:00
    Europe/Paris for the same run; a chat message's time and the rate limit's "retry at" were the
    browser's locale format without a zone."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client, override_settings

    with override_settings(JUNE_EMBEDDED=True):
        call_command("june_demo", stdout=io.StringIO())
    call_command("june_sync_schedules", stdout=io.StringIO())
    operator = get_user_model().objects.get(username="operator")
    client = Client()
    client.force_login(operator)
    context = browser.new_context(base_url=june_server.url, timezone_id="Europe/Paris")
    try:
        context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": june_server.url}])
        page = context.new_page()
        page.goto("/admin/agents_app/agentschedule/")
        row = page.locator("#result_list tbody tr", has_text="daily-summary")
        listed = row.locator("td.field-next_run_local time").text_content()
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 09:00:00 Europe/Paris", listed), listed
        page.goto("/admin/june/dashboard/")
        due = page.locator("#june-schedules tr", has_text="daily-summary").locator("time").first.text_content()
        assert due == listed
        page.goto("/")  # a page of June's own: the same helper (an ES module: the page's own instance)
        helper = "(await import(document.querySelector('script[src*=\"june/time.js\"]').src))"
        assert page.evaluate(f"async () => {helper}.formatTime('2026-12-06T08:00:05.250Z')") == (
            "2026-12-06 09:00:05 Europe/Paris"
        )
        assert page.evaluate(f"async () => {helper}.formatTime(Date.UTC(2026, 6, 1, 12), {{ms: true}})") == (
            "2026-07-01 14:00:00.000 Europe/Paris"
        )
    finally:
        context.close()


def test_the_turn_list_fits_1400_pixels(june_server, new_page):
    """The turn list's right-hand columns were cut off at 1,400 px (hex ids, ten columns)."""
    from django.contrib.auth import get_user_model

    from sessions_app import models as m

    alice = get_user_model().objects.create_user("alice-wide", password="x")
    session = m.Session.objects.create(agent="ops", key="wide", owner=alice)
    m.Turn.objects.create(
        id="f" * 32, session=session, status="completed", input={"text": "order mugs " + "x" * 150}, created_by=alice
    )
    staff = get_user_model().objects.create_user("sam-wide", password="x", is_staff=True, is_superuser=True)
    page = new_page(staff)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto("/admin/sessions_app/turn/")
    page.wait_for_selector("#result_list td.field-asked")
    widths = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert widths[0] <= widths[1], widths
    page.screenshot(path=str(june_server.logs / "turn-list-1400.png"))
