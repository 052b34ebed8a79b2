"""Cancel and reset from the chat in a real Chromium, then the archived generation in the admin."""

from __future__ import annotations

import re

from sessions_app import models as m
from tests.browser.conftest import DEADLINE_MS, open_chat, send_message, wait_live


def test_cancel_mid_stream_from_the_chat(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "cancel1")
    send_message(page, "essay")
    page.wait_for_function("(document.querySelector('.msg.assistant.streaming')?.textContent.length || 0) > 30")
    assert page.locator("#cancel").is_enabled()
    page.click("#cancel")
    page.wait_for_selector('.note >> text="Turn cancelled."')
    assert page.locator("#turn-status").get_attribute("data-status") == "cancelled"
    turn = m.Turn.objects.get(session__key="cancel1")
    assert (turn.status, turn.cancel_reason) == ("cancelled", "requested")
    # the stream stopped before its reply committed: only the user's message is in the log
    assert list(m.Message.objects.filter(turn_id=turn.pk).values_list("role", flat=True)) == ["user"]
    # the session carries on
    send_message(page, "hello after cancel")
    page.wait_for_selector(".msg.assistant >> text=You said: hello after cancel")


def test_cancel_of_a_waiting_tool_from_the_chat_marks_its_row_cancelled(june_server, make_user, new_page):
    """The cancel interrupts the `wait` in flight (issue 36, item 5): no action.completed comes,
    so the chat closes the turn's open tool rows itself (they ticked "running, N s" for good)."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "cancel-wait")
    send_message(page, "wait 90")
    page.wait_for_selector(".tool[data-state=requested] .tool-state >> text=/running, [2-9] s/")
    page.click("#cancel")
    page.wait_for_selector('.note >> text="Turn cancelled."', timeout=10_000)
    page.wait_for_selector(".tool[data-state=cancelled] .tool-state >> text=cancelled")
    turn = m.Turn.objects.get(session__key="cancel-wait")
    assert (turn.status, turn.cancel_reason) == ("cancelled", "requested")
    tool = m.Message.objects.get(turn_id=turn.pk, role="tool")
    assert tool.data["result"] == {"cancelled": True}
    page.reload()  # the replayed log draws the same
    wait_live(page)
    page.wait_for_selector(".tool[data-state=cancelled] .tool-state >> text=cancelled")
    assert page.locator(".tool[data-state=requested]").count() == 0


def test_reset_then_open_the_archived_generation_in_the_admin(june_server, make_user, new_page):
    alice = make_user("alice")
    staff = make_user("sam", staff=True)
    page = open_chat(new_page(alice), "ops", "reset1")
    send_message(page, "hello <b>archive</b>")
    page.wait_for_selector(".msg.assistant >> text=You said: hello <b>archive</b>")
    page.wait_for_function("document.querySelector('#turn-status').dataset.status === 'completed'")
    page.once("dialog", lambda dialog: dialog.accept())  # the chat asks before a reset
    page.click("#reset")
    page.wait_for_selector("#notice >> text=archived as reset1#g0")
    assert page.locator(".msg").count() == 0
    session = m.Session.objects.get(key="reset1")
    assert session.generation == 1 and session.status == "new"

    admin = new_page(staff)
    admin.goto("/admin/sessions_app/session/?q=reset1")
    admin.click("#result_list a:text-is('reset1')")
    admin.wait_for_selector(".june-generations")
    assert admin.locator("tr.june-generation").count() == 2
    row = admin.locator("tr.june-generation[data-generation='0']")
    assert "alice" in row.text_content()
    row.locator("a").click()
    admin.wait_for_selector(".june-generation-page", timeout=DEADLINE_MS)
    assert "reset1#g0" in admin.locator(".june-header").text_content()
    assert re.search(r"Archived by a reset by\s+alice", admin.locator(".june-reset").text_content())
    user_msg = admin.locator(".june-msg.user .text")
    assert user_msg.text_content() == "hello <b>archive</b>"  # shown as text, not markup
    assert admin.locator(".june-msg.user b").count() == 0
    assert "You said: hello <b>archive</b>" in admin.locator(".june-msg.assistant .text").text_content()
    assert admin.locator("tr.june-event[data-type='turn.completed']").count() == 1
    assert admin.locator("tr.june-step").count() >= 1


def test_a_late_delta_of_the_reset_conversation_is_not_drawn_after_the_divider(june_server, make_user, new_page):
    """A reset while another tab's reply streams: under load the old turn streamed on until its
    worker saw the cancel, and the chat drew its late deltas after the "New conversation"
    divider, as a reply of the new conversation, with the header stuck at "running" (the
    turn's end is logged in the archived generation, which the page no longer follows). The
    late delta is injected here as the server would send it."""
    import json

    alice = make_user("alice")
    page = new_page(alice)
    sockets = []

    def through(ws):  # every frame passes as it is; the test can add one from the server's side
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r".*/ws/agents/ops/sessions/late-1/.*"), through)
    open_chat(page, "ops", "late-1")
    send_message(page, "hello")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    old = m.Turn.objects.get(session__key="late-1")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#reset")
    page.wait_for_selector(".note.reset-divider")
    late = {"type": "message.delta", "turn_id": old.pk, "text": "late words", "offset": 0, "base": 1, "snapshot": True}
    sockets[-1].send(json.dumps(late))
    page.wait_for_timeout(1000)
    assert page.locator(".msg.assistant").count() == 0, page.locator("#log").inner_text()
    assert page.locator("#turn-status").get_attribute("data-status") == "idle"
    # the new conversation streams as ever
    send_message(page, "hello again")
    page.wait_for_selector(".msg.assistant >> text=You said: hello again")
