"""Issue 17 ("the four users' day"), the chat as a person uses it, in a real Chromium against a
real daphne + cluster: a refused send keeps the typed text (session parked, text too long); a
message sent while a turn runs shows at once as queued, with its own Cancel; the approval card
shows "waiting for an operator" to a user who cannot answer, then the outcome and who gave it,
with the tool's result drawn after the card; a reset's banner is live-only and dismissible, and
the owner reads the archived conversation. Keyboard only and a 390×844 viewport included."""

from __future__ import annotations

import threading
from typing import Any

from tests.browser.conftest import DEADLINE_MS, chat_url, open_chat, send_message, wait_live

PROMPT = "Approve a $10.00 refund on order 42?"


def _index(page: Any, selector: str) -> int:
    """Position among the log's children of the first element matching ``selector``."""
    return page.evaluate(
        "(sel) => [...document.getElementById('log').children].indexOf(document.querySelector(sel))", selector
    )


def _answer_via_api(turn_id: str, user: Any, answer: bool) -> None:
    """An operator answers from their phone (the approvals API)."""
    import json

    from django.test import Client

    from sessions_app.models import ApiToken

    token = ApiToken.issue(user, name="phone")[1]
    out: list[Any] = []

    def call() -> None:  # off Playwright's thread (its event loop forbids async_to_sync there)
        out.append(
            Client().post(
                f"/api/approvals/{turn_id}/answer",
                json.dumps({"input_id": "approve-refund", "answer": answer}),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )
        )

    worker = threading.Thread(target=call)
    worker.start()
    worker.join(60)
    assert out and out[0].status_code in (200, 202), out and out[0].content


def test_refused_sends_keep_the_text_and_the_card_shows_who_may_answer_and_the_outcome(
    june_server, make_user, new_page
):
    from sessions_app import models as m

    alice = make_user("alice")
    olga = make_user("olga", staff=True, groups=("operators",))
    chat = open_chat(new_page(alice), "ops", "day-refund")
    send_message(chat, "refund order 42 10")
    chat.wait_for_selector(".approval[data-state=open]")
    # the user cannot answer under the operator policy: no buttons, a plain "waiting" line
    chat.wait_for_selector(".approval[data-answerable=no]")
    assert "operator" in chat.locator(".approval-waiting").text_content()
    assert not chat.locator(".approval button:has-text('Approve')").is_visible()

    # a send refused by the server (the session waits for an answer): the text stays, the reason shows
    chat.fill("#text", "and a teapot please")
    chat.press("#text", "Enter")
    chat.wait_for_selector("#composer-error:not([hidden])")
    assert "waiting for an answer" in chat.locator("#composer-error").text_content()
    assert chat.input_value("#text") == "and a teapot please"
    # over the limit: refused before sending, the text stays
    chat.fill("#text", "x" * 32_001)
    chat.click("#send")
    chat.wait_for_function("document.getElementById('composer-error').textContent.includes('32,000')")
    assert len(chat.input_value("#text")) == 32_001
    assert m.Turn.objects.filter(session__key="day-refund").count() == 1

    # the operator approves from the approvals API: the card says so, and who
    turn = m.Turn.objects.get(session__key="day-refund")
    _answer_via_api(turn.pk, olga, True)
    chat.wait_for_selector(".approval[data-state=answered][data-outcome=approved]")
    assert chat.locator(".approval-outcome").text_content() == "Approved by olga over the API."
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    # rows in time order: the refund's result comes after the card, not above it
    chat.wait_for_selector(".tool[data-state=completed] >> text=issue_refund")
    assert _index(chat, ".approval") < _index(chat, ".tool[data-state=completed]")
    assert _index(chat, ".tool[data-state=requested]") < _index(chat, ".approval")

    # the page reloaded: the same outcome from the log
    chat.reload()
    wait_live(chat)
    chat.wait_for_selector(".approval[data-outcome=approved]")
    assert chat.locator(".approval-outcome").text_content() == "Approved by olga over the API."

    # after the answer, a normal send clears the box once the server accepted it
    chat.fill("#text", "order mugs")
    chat.press("#text", "Enter")
    chat.wait_for_function("document.getElementById('text').value === ''")
    assert chat.locator("#composer-error").is_hidden()


def test_a_denial_reads_denied_by_and_the_operator_sees_the_buttons(june_server, make_user, new_page):
    from sessions_app import models as m

    olga = make_user("olga", staff=True, groups=("operators",))
    chat = open_chat(new_page(olga), "ops", "day-deny")
    send_message(chat, "refund order 7 25")
    chat.wait_for_selector(".approval[data-answerable=yes]")
    assert chat.locator(".approval button:has-text('Deny')").is_visible()
    chat.click(".approval button:has-text('Deny')")
    chat.wait_for_selector(".approval[data-outcome=denied]")
    assert chat.locator(".approval-outcome").text_content() == "Denied by olga."
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    assert m.Answer.objects.get().answer is False


def test_a_message_sent_during_a_turn_is_shown_queued_at_once_with_its_own_cancel(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice")
    chat = open_chat(new_page(alice), "ops", "day-queue")
    send_message(chat, "essay")
    chat.wait_for_selector(".msg.assistant.streaming")
    send_message(chat, "order mugs")
    row = chat.wait_for_selector(".queued-msg")
    assert row.query_selector(".queued-text").text_content() == "order mugs"
    assert chat.input_value("#text") == ""
    # one status per turn: the session runs (one queued), the essay's message says running
    chat.wait_for_function("document.getElementById('turn-status').textContent === 'running · 1 queued'")
    assert chat.locator(".msg.user[data-tag=running]").text_content() == "essay"
    # Cancel on the queued message cancels that one, not the running essay
    row.query_selector("button:has-text('Cancel')").click()
    chat.wait_for_selector(".queued-msg", state="detached")
    chat.wait_for_selector(".note >> text=Queued message cancelled")
    queued = m.Turn.objects.get(session__key="day-queue", input__text="order mugs")
    assert queued.status == "cancelled"
    assert m.Turn.objects.get(session__key="day-queue", input__text="essay").status == "running"
    # a reload shows a queued message too
    send_message(chat, "stock tea")
    chat.wait_for_selector(".queued-msg >> text=stock tea")
    chat.reload()
    wait_live(chat)
    chat.wait_for_selector(".queued-msg >> text=stock tea")
    # the header's Cancel stops the running turn; the queued one then runs
    chat.click("#cancel")
    chat.wait_for_selector(".msg.user[data-tag=cancelled] >> text=essay")
    chat.wait_for_selector(".queued-msg", state="detached", timeout=DEADLINE_MS)
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")


def test_a_message_queued_in_one_tab_shows_queued_in_another_at_once(june_server, make_user, new_page):
    """A message queued behind a running turn in one tab was invisible in a second tab of the
    same session until its turn started: a tab learnt of queued turns only from its socket's
    ``ready`` frame, at a reload. Now the second tab shows it at once, with its Cancel, and a
    cancel there reaches the first tab."""
    from sessions_app import models as m

    alice = make_user("alice")
    first = open_chat(new_page(alice), "ops", "day-tabs")
    second = open_chat(new_page(alice), "ops", "day-tabs")
    send_message(first, "essay")
    second.wait_for_selector(".msg.assistant.streaming")
    send_message(first, "order mugs")
    first.wait_for_selector(".queued-msg >> text=order mugs")
    row = second.wait_for_selector(".queued-msg >> text=order mugs", timeout=5_000)
    second.wait_for_function("document.getElementById('turn-status').textContent === 'running · 1 queued'")
    row.query_selector("xpath=..").query_selector("button:has-text('Cancel')").click()
    first.wait_for_selector(".queued-msg", state="detached")
    second.wait_for_selector(".queued-msg", state="detached")
    assert m.Turn.objects.get(session__key="day-tabs", input__text="order mugs").status == "cancelled"
    first.click("#cancel")
    second.wait_for_selector(".msg.user[data-tag=cancelled] >> text=essay")


def test_reset_banner_is_live_only_and_the_owner_reads_the_archive(june_server, make_user, new_page):
    alice = make_user("alice")
    chat = open_chat(new_page(alice), "ops", "day-reset")
    send_message(chat, "order mugs")
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    chat.once("dialog", lambda dialog: dialog.accept())
    chat.click("#reset")
    chat.wait_for_selector("#notice:not([hidden])")
    assert "day-reset#g0" in chat.locator("#notice").text_content()
    chat.click("#notice .dismiss")
    assert chat.locator("#notice").is_hidden()
    chat.reload()
    wait_live(chat)
    chat.wait_for_selector(".reset-divider")
    assert chat.locator("#notice").is_hidden(), "the banner does not come back on reload"
    chat.click(".reset-divider a")
    chat.wait_for_selector(".archive-list")
    chat.click("text=day-reset#g0")
    chat.wait_for_selector("#archive-log .msg.user")
    assert chat.locator("#archive-log .msg.user").first.text_content() == "order mugs"
    assert chat.locator("#archive-log .tool >> text=create_order").count() >= 1
    assert chat.locator("#archive-log form, #archive-log button").count() == 0, "read-only"
    # someone else may not read it
    other = new_page(make_user("mallory"))
    assert other.goto(chat_url("ops", "day-reset") + "archive/0/").status == 403


def test_keyboard_only_on_a_phone_sized_viewport(june_server, make_user, browser):
    from django.test import Client

    alice = make_user("alice")
    client = Client()
    client.force_login(alice)
    context = browser.new_context(
        base_url=june_server.url, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    context.set_default_timeout(DEADLINE_MS)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": june_server.url}])
    try:
        page = context.new_page()
        page.goto(chat_url("ops", "day-phone"))
        wait_live(page)
        assert page.evaluate("document.activeElement.id") == "text", "the cursor is in the message box"
        page.keyboard.type("stock tea")
        page.keyboard.press("Enter")
        page.wait_for_selector(".msg.user >> text=stock tea")
        page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
        assert page.evaluate("document.activeElement.id") == "text"
        # nothing wider than the screen: the composer and the header fit
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, width
        box = page.locator("#send").bounding_box()
        assert box and box["x"] + box["width"] <= 390
        # Tab reaches the controls in order, Enter on "replace" explains itself by its label
        assert "stop the current reply" in page.locator("label:has(#replace)").text_content()
    finally:
        context.close()


def test_a_send_while_disconnected_keeps_the_text(june_server, make_user, new_page):
    """The socket drops (the page's websocket is routed through the test, which cuts it)."""
    alice = make_user("alice")
    page = new_page(alice)
    routes: list = []
    cut = {"on": False}

    def route(ws) -> None:
        if cut["on"]:
            ws.close(code=1012, reason="test: still down")  # the reconnects fail too, for now
            return
        ws.connect_to_server()
        routes.append(ws)

    page.route_web_socket("**/ws/**", route)
    chat = open_chat(page, "ops", "day-offline")
    cut["on"] = True
    for ws in routes:
        ws.close(code=1012, reason="test: connection dropped")
    chat.wait_for_function("document.getElementById('conn').dataset.state !== 'live'")
    chat.fill("#text", "are you there?")
    chat.press("#text", "Enter")
    chat.wait_for_selector("#composer-error:not([hidden])")
    assert "not connected" in chat.locator("#composer-error").text_content().lower()
    assert chat.input_value("#text") == "are you there?"
    cut["on"] = False
    wait_live(chat)
    chat.press("#text", "Enter")
    chat.wait_for_selector(".msg.user >> text=are you there?")
    assert chat.input_value("#text") == ""
