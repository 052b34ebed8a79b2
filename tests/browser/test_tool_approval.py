"""A declared approval of a tool call in the chat (Chromium, real daphne + worker): the card shows
the tool and its input in an editable box; Approve runs it as proposed, "Run edited" with the
person's input, Reject never runs it (the agent reads the note)."""

from __future__ import annotations

import time

from agents_app.models import Order
from tests.browser.conftest import open_chat, send_message, wait_live

#: press the open card's Approve at the time ``at`` (ms since the epoch), and say whether it was there
CLICK_AT = """at => setTimeout(() => {
    const button = document.querySelector('.approval.card[data-state=open] button.primary');
    window.juneClicked = Boolean(button);
    button?.click();
}, at - Date.now())"""


def _card(page):
    """The open card (an answered one stays in the log, its form disabled)."""
    page.wait_for_selector(".approval.card[data-state=open] .tool-approval textarea.approval-input")
    return page.locator(".approval.card[data-state=open]").last


def _completed(page):
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'", timeout=30000)


def test_approve_edit_and_reject_a_tool_call_in_the_chat(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "bulk1")

    send_message(page, "bulk order 50 mugs")
    card = _card(page)
    assert "Tool: bulk_order" in card.text_content()
    assert '"quantity": 50' in card.locator("textarea.approval-input").input_value()
    card.locator("button", has_text="Approve").click()
    page.wait_for_selector(".approval.card[data-outcome=approved]")
    _completed(page)

    send_message(page, "bulk order 30 tea")
    card = _card(page)
    card.locator("textarea.approval-input").fill('{"item": "tea", "quantity": 3}')
    card.locator("button", has_text="Run edited").click()
    page.wait_for_selector(".approval.card[data-outcome=edited]")
    _completed(page)
    assert '"quantity": 3' in page.locator(".msg.assistant").last.text_content()

    send_message(page, "bulk order 900 pears")
    card = _card(page)
    card.locator("input.approval-message").fill("nobody needs 900 pears")
    card.locator("button", has_text="Reject").click()
    page.wait_for_selector(".approval.card[data-outcome=rejected]")
    _completed(page)
    assert "nobody needs 900 pears" in page.locator(".msg.assistant").last.text_content()

    assert sorted(Order.objects.values_list("item", "quantity")) == [("mugs", 50), ("tea", 3)]

    page.reload()  # the answered cards read the same after a reload
    wait_live(page)
    assert page.locator(".approval.card[data-outcome=edited]").count() == 1
    assert page.locator(".approval.card[data-outcome=rejected]").count() == 1


def test_invalid_json_in_the_edit_box_is_refused_in_the_page(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "bulk2")
    send_message(page, "bulk order 5 mugs")
    card = _card(page)
    card.locator("textarea.approval-input").fill("{not json")
    card.locator("button", has_text="Run edited").click()
    assert "not valid JSON" in card.locator(".card-error").text_content()
    card.locator("textarea.approval-input").fill('{"item": "mugs", "quantity": "lots"}')
    card.locator("button", has_text="Run edited").click()
    page.wait_for_function("document.querySelector('.approval.card .card-error').textContent.includes('schema')")
    assert not Order.objects.exists()


def test_a_send_refused_while_waiting_is_cleared_once_the_answer_is_given(june_server, make_user, new_page):
    """Issue 40: "Not sent: the session is waiting for an answer…" stayed under the composer
    after the approval completed."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "bulk3")
    send_message(page, "bulk order 5 mugs")
    card = _card(page)
    page.fill("#text", "and some tea")
    page.click("#composer button[type=submit]")
    page.wait_for_function("/waiting for an answer/.test(document.getElementById('composer-error').textContent)")
    assert page.locator("#text").input_value() == "and some tea"  # the text is kept
    card.locator("button", has_text="Approve").click()
    page.wait_for_selector(".approval.card[data-outcome=approved]")
    page.wait_for_function("document.getElementById('composer-error').hidden")


def test_the_admin_says_whose_it_is(june_server, make_user, new_page):
    """Issue 40: the admin still said "Django administration"."""
    page = new_page()
    page.goto("/admin/login/")
    assert "June administration" in page.title() and "Django administration" not in page.content()


def test_the_header_takes_the_first_messages_title_at_once_and_shows_the_key_once(june_server, make_user, new_page):
    """Issue 40: the header kept the session key after the first message titled the session (it
    changed only on reload), and a new session showed its key twice."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "titled1")
    assert page.locator("#session-title").text_content() == "New session"
    assert page.locator("#session-key").is_hidden()
    assert page.content().count("titled1") >= 1 and "titled1 / titled1" not in page.locator("h1").text_content()
    send_message(page, "Plan the spring catalogue for the tea shop")
    page.wait_for_function("document.getElementById('session-title').textContent.startsWith('Plan the spring')")
    assert "Plan the spring" in page.title()
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    page.reload()
    wait_live(page)
    assert page.locator("#session-title").text_content() == "Plan the spring catalogue for the tea shop"
    send_message(page, "order mugs")  # a later message does not retitle it
    page.wait_for_selector(".tool >> text=create_order")
    assert page.locator("#session-title").text_content() == "Plan the spring catalogue for the tea shop"


def test_a_long_session_opens_at_its_newest_message(june_server, make_user, new_page):
    """Issue 40: a long session opened in the middle (6,833 px above the newest message): the
    replayed replies grow after their bubbles are appended."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "long1")
    words = " ".join(f"word{i}" for i in range(150))  # the demo model echoes it back, in deltas
    for n in range(5):
        send_message(page, f"note {n}: {words}")
        page.wait_for_function(f"document.querySelectorAll('.msg.assistant:not(.streaming)').length === {n + 1}")
    page.reload()
    wait_live(page)
    page.wait_for_function("document.querySelectorAll('.msg.assistant').length === 5")
    page.wait_for_timeout(300)
    gap = page.evaluate(
        "(() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight; })()"
    )
    assert page.evaluate(
        "document.getElementById('log').scrollHeight > 2 * document.getElementById('log').clientHeight"
    )
    assert gap < 5, gap


def test_parallel_calls_show_every_card_at_once_answered_in_any_order(june_server, make_user, new_page):
    """One model step, three calls that each need approval: three open cards at once; the last
    answered first; the turn goes on only after the third answer, each answer reaching its call."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "bulk3")
    send_message(page, "bulk order 50 mugs and 20 pens and 10 cups")
    page.wait_for_function(
        "document.querySelectorAll('.approval.card[data-state=open] textarea.approval-input').length === 3"
    )
    cards = page.locator(".approval.card[data-state=open]")
    assert [
        '"item": "mugs"' in cards.nth(0).locator("textarea").input_value(),
        '"item": "cups"' in cards.nth(2).locator("textarea").input_value(),
    ] == [True, True]

    cups = page.locator(".approval.card").nth(2)
    cups.locator("textarea.approval-input").fill('{"item": "cups", "quantity": 4}')
    cups.locator("button", has_text="Run edited").click()
    page.wait_for_selector(".approval.card[data-outcome=edited]")
    mugs = page.locator(".approval.card").nth(0)
    mugs.locator("input.approval-message").fill("no mugs")
    mugs.locator("button", has_text="Reject").click()
    page.wait_for_selector(".approval.card[data-outcome=rejected]")
    assert page.evaluate("document.getElementById('turn-status').dataset.status") == "suspended"
    assert not Order.objects.exists()

    page.locator(".approval.card[data-state=open]").locator("button", has_text="Approve").click()
    _completed(page)
    assert sorted(Order.objects.values_list("item", "quantity")) == [("cups", 4), ("pens", 20)]
    assert "no mugs" in page.locator(".msg.assistant").last.text_content()


def test_the_same_approval_in_two_tabs_ends_answered_in_both_without_an_error(june_server, make_user, new_page):
    """Approve pressed in two tabs at once: one answer wins, the other is a 409. The losing tab's
    card went back to "open" (or kept the error under the outcome): "turn 01a2… is not waiting for
    an answer" beside "Approved by alice."."""
    alice = make_user("alice")
    first = open_chat(new_page(alice), "ops", "bulk-twice")
    second = open_chat(new_page(alice), "ops", "bulk-twice")
    send_message(first, "bulk order 50 mugs")
    for page in (first, second):
        _card(page)
    # both clicked at one moment of the one clock the tabs share, so that both answers are sent
    # before either comes back (clicked one after the other, the second tab's card was sometimes
    # answered from the first before its click)
    at = time.time() * 1000 + 1000
    for page in (first, second):
        page.evaluate(CLICK_AT, at)
    for page in (first, second):
        page.wait_for_function("window.juneClicked !== undefined")
        assert page.evaluate("window.juneClicked"), "the other tab's answer came back before this tab's click"
    for page in (first, second):
        page.wait_for_selector(".approval.card[data-outcome=approved]")
        _completed(page)
        page.wait_for_timeout(500)  # the losing answer's error frame has come by now
        card = page.locator(".approval.card").last
        assert card.get_attribute("data-state") == "answered"
        assert card.locator(".card-error").text_content() == "", card.text_content()
    assert Order.objects.filter(item="mugs", quantity=50).count() == 1
