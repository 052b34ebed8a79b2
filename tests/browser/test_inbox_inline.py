"""The approval inbox answers in its list (issue 40 item 0): a yes/no request has Approve and
Deny in its row (Approve green, Deny red, neither grey), the session shows by its title with
the key on hover, and answering from the row returns to the inbox with the turn finished."""

from __future__ import annotations

from tests.browser.conftest import open_chat, send_message

INBOX = "/admin/sessions_app/approvalrequest/"
PROMPT = "Approve a $10.00 refund on order 42?"


def test_approve_from_the_inbox_row_finishes_the_turn_and_the_chat_sees_it(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice")
    olga = make_user("olga", staff=True, groups=("operators",))
    chat = open_chat(new_page(alice), "ops", "inline-refund")
    send_message(chat, "refund order 42 10")
    chat.wait_for_selector(".approval[data-state=open]")

    admin = new_page(olga)
    admin.goto(INBOX)
    row = admin.locator("#result_list tbody tr", has_text=PROMPT)
    assert row.count() == 1
    session = row.locator("td.field-session_key a, th.field-session_key a").first
    assert session.text_content() == "refund order 42 10" and session.get_attribute("title") == "inline-refund"
    approve, deny = row.locator("button.june-approve"), row.locator("button.june-deny")
    green = approve.evaluate("b => getComputedStyle(b).backgroundColor")
    red = deny.evaluate("b => getComputedStyle(b).backgroundColor")
    assert green == "rgb(46, 125, 50)" and red == "rgb(186, 33, 33)"
    approve.click()
    admin.wait_for_url(f"**{INBOX}")
    admin.wait_for_selector(".messagelist >> text=Answer recorded; the turn is")
    assert admin.locator("#result_list tbody tr", has_text=PROMPT).count() == 0
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    turn = m.Turn.objects.get(session__key="inline-refund")
    assert turn.status == "completed" and m.Answer.objects.get(turn=turn).answer is True


def test_the_answer_page_approve_button_is_green_not_grey(june_server, make_user, new_page):
    alice = make_user("alice")
    olga = make_user("olga", staff=True, groups=("operators",))
    chat = open_chat(new_page(alice), "ops", "inline-refund2")
    send_message(chat, "refund order 42 10")
    chat.wait_for_selector(".approval[data-state=open]")
    admin = new_page(olga)
    admin.goto(INBOX)
    admin.locator("#result_list tbody tr", has_text=PROMPT).locator("a", has_text=PROMPT).click()
    color = admin.locator("#june-approve").evaluate("b => getComputedStyle(b).backgroundColor")
    assert color == "rgb(46, 125, 50)"
