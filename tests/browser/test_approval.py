"""Human in the loop in a real Chromium: a refund asked for in the chat parks with a card, an
operator approves it in the admin inbox from another browser context, and the chat shows the
turn finishing live. A staff user who is not an operator does not see it (see conftest.py for
the daphne + qcluster harness)."""

from __future__ import annotations

import re

from tests.browser.conftest import open_chat, send_message

INBOX = "/admin/sessions_app/approvalrequest/"
PROMPT = "Approve a $10.00 refund on order 42?"


def test_a_refund_card_in_the_chat_is_approved_by_an_operator_in_the_admin_inbox(june_server, make_user, new_page):
    from agents_app.models import Refund
    from sessions_app import models as m

    alice = make_user("alice")
    olga = make_user("olga", staff=True, groups=("operators",))
    sam = make_user("sam", staff=True)  # staff, not an operator

    chat = open_chat(new_page(alice), "ops", "refund-b")
    send_message(chat, "refund order 42 10")
    card = chat.wait_for_selector(".approval[data-state=open]")
    assert card.query_selector(".approval-prompt").text_content() == PROMPT
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'suspended'")
    turn = m.Turn.objects.get(session__key="refund-b")
    assert turn.status == "suspended"
    # the speaker is not an operator: the card says it waits for an operator, without buttons
    # (issue 17: the server's 403 for such an answer is pinned in tests/integration/test_api_lists.py)
    chat.wait_for_selector(".approval[data-answerable=no]")
    assert "operator" in chat.locator(".approval .approval-waiting").text_content()
    assert not chat.locator(".approval button:has-text('Approve')").is_visible()
    assert chat.locator(".approval").get_attribute("data-state") == "open"
    turn.refresh_from_db()
    assert turn.status == "suspended" and not m.Answer.objects.exists()

    # a staff user who is not an operator: an empty inbox, and the request itself is refused
    other = new_page(sam)
    other.goto(INBOX)
    assert other.locator("h1").first.text_content()  # the admin page rendered
    assert PROMPT not in other.content() and other.locator("#result_list tbody tr").count() == 0
    assert other.goto(f"{INBOX}{turn.pk}/change/").status == 403

    # the operator: listed with its details, answered with the Approve button
    admin = new_page(olga)
    admin.goto(INBOX)
    row = admin.locator("#result_list tbody tr", has_text=PROMPT)
    assert row.count() == 1
    text = row.text_content()
    # the session by its title (the first message), its key on hover (issue 40)
    assert "ops" in text and "refund order 42 10" in text and "issue_refund" in text and '"order_id": "42"' in text
    assert row.locator("[title=refund-b]").count() == 1
    row.get_by_role("link", name=PROMPT).click()
    admin.wait_for_selector("#june-approve")
    assert re.search(r'"amount": 10', admin.locator("#june-call-args").text_content())
    admin.click("#june-approve")
    admin.wait_for_selector(".messagelist >> text=Answer recorded")
    assert admin.locator("#june-answer-form").count() == 0
    assert "olga" in admin.locator("#june-answers").text_content()

    # the chat tab follows live: the card closes and the turn finishes
    chat.wait_for_selector(".approval[data-state=answered]")
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    assert chat.locator(".approval button:has-text('Approve')").is_disabled()
    assert "refund" in chat.locator(".msg.assistant").last.text_content().lower()
    turn.refresh_from_db()
    assert turn.status == "completed"
    assert Refund.objects.filter(order_ref="42").count() == 1
    answer = m.Answer.objects.get(turn=turn)
    assert (answer.user_id, answer.via, answer.answer) == (olga.pk, "admin", True)
    # answered: no longer in the operator's inbox
    admin.goto(INBOX)
    assert admin.locator("#result_list tbody tr", has_text=PROMPT).count() == 0
