"""A cancelled reply's discarded text survives a reload and a reset (issue 40 item 0): the
chat draws it struck through live and again from the replayed log (the turn.cancelled event
carries it), and the owner's archive shows the user's message, the discarded text and a
"Turn cancelled" marker rather than a message with no reply."""

from __future__ import annotations

from sessions_app import models as m
from tests.browser.conftest import open_chat, send_message, wait_live


def test_discarded_text_is_struck_through_after_a_reload_and_in_the_archive(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "discard1")
    send_message(page, "essay")
    page.wait_for_function("(document.querySelector('.msg.assistant.streaming')?.textContent.length || 0) > 30")
    page.click("#cancel")
    page.wait_for_selector('.note >> text="Turn cancelled."')
    page.wait_for_selector(".msg.assistant.discarded")
    live = page.locator(".msg.assistant.discarded").text_content()
    assert len(live) > 30

    turn = m.Turn.objects.get(session__key="discard1")
    event = m.Event.objects.get(turn_id=turn.pk, type="turn.cancelled")
    kept = event.data["discarded"]
    assert len(kept) > 30 and live.startswith(kept[:30])  # what was streamed, not the whole essay

    page.reload()
    wait_live(page)
    page.wait_for_selector('.note >> text="Turn cancelled."')
    replayed = page.locator(".msg.assistant.discarded")
    assert replayed.count() == 1
    assert replayed.text_content().startswith(kept[:30])
    assert "line-through" in replayed.evaluate("e => getComputedStyle(e).textDecorationLine")
    assert page.locator(".msg.assistant:not(.discarded)").count() == 0  # nothing reads as a reply

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#reset")
    page.wait_for_selector("#notice >> text=archived as discard1#g0")
    page.goto("/agents/ops/sessions/discard1/archive/0/")
    log = page.locator("#archive-log")
    assert log.locator(".msg.user").text_content() == "essay"
    assert log.locator(".msg.assistant.discarded").text_content().startswith(kept[:30])
    assert log.locator(".note.cancelled").text_content() == "Turn cancelled."
    # the marker follows the user's message
    order = log.evaluate("e => [...e.children].map(c => c.className)")
    assert order == ["msg user", "msg assistant discarded", "note cancelled"]
