"""The ops agent's scheduled daily summary appears live in the demo user's "Ops inbox"."""

from __future__ import annotations

from tests.browser.conftest import open_chat

DEADLINE_MS = 150_000  # a slow machine: the worker, the turn, the page


def test_the_scheduled_summary_appears_live_in_the_ops_inbox(june_server, make_user, new_page):
    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.models import Schedule
    from django_q.scheduler import scheduler

    from sessions_app.proactive.schedules import schedules_sync

    demo = make_user("demo")
    schedules_sync()
    page = open_chat(new_page(demo), "ops", "ops-inbox")
    assert page.locator(".msg").count() == 0
    # the schedule is due now. A cluster's guard loop runs django-q2's scheduler pass every 30 s;
    # that pass, run here at once, queues the tick, and the server's own worker runs it
    # (tests/integration/test_schedules.py fires ticks from the clusters' own loops)
    Schedule.objects.filter(name="june:ops:daily-summary").update(next_run=timezone.now())
    scheduler(broker=get_broker())
    trigger = page.wait_for_selector(".msg.trigger", timeout=DEADLINE_MS)
    assert trigger.text_content() == "summary of today"
    page.wait_for_function(
        "[...document.querySelectorAll('.msg.assistant')].some(m => m.textContent.startsWith('Daily summary'))",
        timeout=DEADLINE_MS,
    )
    assert page.locator(".msg.user").count() == 0  # no human sent anything
    page.goto("/")
    assert page.locator("[data-agent=ops] .sessions li >> text=Ops inbox").count() == 1
