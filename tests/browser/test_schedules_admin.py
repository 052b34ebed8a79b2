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
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 09:00 Europe/Paris", shown), shown  # cron 0 9 * * * in Paris

    before = timezone.now()
    row.locator("button.june-run-now").click()
    page.wait_for_selector(".messagelist >> text=1 schedule(s) due now")
    schedule.refresh_from_db()
    assert schedule.next_run >= before - timezone.timedelta(seconds=1)
    assert page.url.endswith("/admin/agents_app/agentschedule/")
    # a GET does nothing
    assert page.request.get(f"{page.url}{schedule.pk}/run-now/").status == 405
