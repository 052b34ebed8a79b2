"""Issue 17 in a real Chromium, the operator's side and the session list: the admin index and
the inbox count what waits and say who asked (with links to the session and the turn), the
dashboard shows a new parked request without a reload, a turn page reads as a timeline with
expandable results and its cost, the demo operator runs a schedule now; and for chat users, a
session is titled from its first message (renamable) and the list shows a preview, a cancelled
partial reply is marked discarded, live rows carry their time on hover."""

from __future__ import annotations

from tests.browser.conftest import DEADLINE_MS, open_chat, send_message, wait_live

PROMPT = "Approve a $10.00 refund on order 42?"


def _wait_completed(page) -> None:
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")


def test_the_operator_sees_what_waits_who_asked_and_the_dashboard_follows_live(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice")
    olga = make_user("olga", staff=True, groups=("operators",))
    admin = new_page(olga)
    admin.goto("/admin/june/dashboard/")
    admin.wait_for_selector("#june-dashboard")
    assert admin.locator("#june-count-parked b").text_content() == "0"

    chat = open_chat(new_page(alice), "ops", "console-refund")
    send_message(chat, "refund order 42 10")
    chat.wait_for_selector(".approval[data-state=open]")
    turn = m.Turn.objects.get(session__key="console-refund")

    # the dashboard re-reads itself: the parked request appears without a reload
    admin.wait_for_function("document.querySelector('#june-count-parked b').textContent === '1'", timeout=DEADLINE_MS)
    row = admin.locator("#june-parked tbody tr", has_text=PROMPT)
    assert "alice" in row.text_content() and "ops/console-refund" in row.text_content()

    admin.goto("/admin/")
    assert admin.locator("#june-waiting-count").text_content() == "1"
    admin.click("#june-console-summary >> text=Approval inbox")
    assert "Approval inbox (1 waiting)" in admin.locator("h1").first.text_content()
    inbox_row = admin.locator("#result_list tbody tr", has_text=PROMPT)
    assert "alice" in inbox_row.locator(".field-requested_by").text_content()
    assert inbox_row.locator(".field-session_key a").get_attribute("href").endswith("/generation/0/")
    inbox_row.locator(".field-turn_link a").click()
    admin.wait_for_selector("#june-timeline")
    assert admin.url.endswith(f"/turn/{turn.pk}/change/")
    assert admin.locator("#june-timeline tr[data-kind=input]").count() == 1
    assert "parked: waiting for an answer" in admin.content()

    # answer it from the answer page, which links back to the turn
    admin.goto(f"/admin/sessions_app/approvalrequest/{turn.pk}/change/")
    assert admin.locator(f"a[href$='/turn/{turn.pk}/change/']").count() >= 1
    admin.click("#june-approve")
    admin.wait_for_selector(".messagelist >> text=Answer recorded")
    chat.wait_for_selector(".approval[data-outcome=approved]")
    _wait_completed(chat)

    # the timeline of the finished turn: tool rows with durations, results expandable, tokens
    admin.goto(f"/admin/sessions_app/turn/{turn.pk}/change/")
    tool = admin.locator("#june-timeline tr[data-kind=tool]", has_text="issue_refund")
    assert tool.get_attribute("data-state") == "completed"
    answer = admin.locator("#june-timeline tr[data-kind=answer]")
    assert "answered by olga via admin" in answer.text_content()
    assert admin.locator("#june-timeline tr[data-kind=model] td").nth(6).text_content().strip().endswith(("out", "0"))
    assert "tokens and cost" in admin.content().lower()
    admin.goto("/admin/june/dashboard/")
    assert admin.locator("#june-count-parked b").text_content() == "0"
    assert "ops" in admin.locator("#june-usage-agents").text_content()


def test_the_timeline_expands_a_long_result(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice")
    root = make_user("root", staff=True)
    root.is_superuser = True
    root.save()
    chat = open_chat(new_page(alice), "ops", "console-long")
    # the demo answers "You said: ..." with the text: over the 400 characters a row shows, in
    # seconds (its essay streams for half a minute, to be cancelled mid-stream)
    send_message(chat, "a line that runs long " * 20)
    _wait_completed(chat)
    turn = m.Turn.objects.get(session__key="console-long")
    page = new_page(root)
    page.goto(f"/admin/sessions_app/turn/{turn.pk}/change/")
    details = page.locator("#june-timeline tr[data-kind=model] details").first
    assert not details.locator("pre").is_visible()
    details.locator("summary").click()
    assert details.locator("pre").is_visible()
    assert len(details.locator("pre").text_content()) > len(details.locator("summary").text_content())


def test_the_demo_operator_runs_a_schedule_now(june_server, new_page):
    import io

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import override_settings

    with override_settings(JUNE_EMBEDDED=True):
        call_command("june_demo", stdout=io.StringIO())
    call_command("june_sync_schedules", stdout=io.StringIO())
    operator = get_user_model().objects.get(username="operator")
    page = new_page(operator)
    page.goto("/admin/agents_app/agentschedule/")
    page.locator("#result_list tbody input.action-select").first.check()
    page.select_option("select[name=action]", "run_now")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist >> text=due now")
    page.goto("/admin/agents_app/schedulerun/")
    assert page.locator("h1").first.text_content()
    page.goto("/admin/agents_app/webhookdelivery/")
    assert page.locator("#changelist").count() == 1


def test_sessions_are_titled_from_their_first_message_renamable_with_a_preview(june_server, make_user, new_page):
    alice = make_user("alice")
    chat = open_chat(new_page(alice), "ops", "titled")
    send_message(chat, "stock tea")
    _wait_completed(chat)
    assert chat.locator(".msg.user").last.get_attribute("title").startswith("at "), "its time on hover"
    chat.goto("/")
    row = chat.locator(".session-row[data-key=titled]")
    assert row.locator(".session-title").text_content() == "stock tea"
    assert row.locator(".session-preview").text_content().strip()
    row.locator(".session-title").click()
    wait_live(chat)
    assert chat.locator("#session-title").text_content() == "stock tea"
    chat.click(".rename summary")
    chat.fill(".rename input[name=title]", "Tea stock check")
    chat.press(".rename input[name=title]", "Enter")
    wait_live(chat)
    assert chat.locator("#session-title").text_content() == "Tea stock check"
    chat.goto("/")
    assert chat.locator(".session-row[data-key=titled] .session-title").text_content() == "Tea stock check"


def test_a_cancelled_partial_reply_is_marked_discarded(june_server, make_user, new_page):
    alice = make_user("alice")
    chat = open_chat(new_page(alice), "ops", "discard")
    send_message(chat, "essay")
    chat.wait_for_function("(document.querySelector('.msg.assistant.streaming') || {}).textContent?.length > 20")
    chat.click("#cancel")
    chat.wait_for_selector(".msg.assistant.discarded")
    assert "discarded" in chat.locator(".msg.assistant.discarded").get_attribute("title")
    chat.wait_for_selector(".msg.user[data-tag=cancelled]")


def test_a_long_tool_shows_its_running_time_also_after_a_reload(june_server, make_user, new_page):
    alice = make_user("alice")
    chat = open_chat(new_page(alice), "ops", "long-tool")
    send_message(chat, "wait 8")
    chat.wait_for_selector(".tool[data-state=requested] .tool-state >> text=/running, [4-9] s/")
    chat.reload()
    wait_live(chat)
    # the replayed row is timed from when its request was committed, not from the reload (which
    # would first read "running, 2 s")
    state = chat.wait_for_selector(".tool[data-state=requested] .tool-state >> text=/running, \\d+ s/")
    assert int(state.text_content().split(", ")[1].split()[0]) >= 4
    assert chat.locator(".msg.user").first.get_attribute("title").startswith("at ")
    chat.wait_for_selector(".tool[data-state=completed] >> text=wait", timeout=DEADLINE_MS)
