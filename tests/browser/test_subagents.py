"""Subagents in a real Chromium (daphne + qcluster): a research request shows each researcher
child nested under the tool call — its streaming text and its own tool calls — live and after a
reload; a child's approval answered by an operator in the admin inbox finishes the child and then
its parent."""

from __future__ import annotations

from tests.browser.conftest import open_chat, send_message

INBOX = "/admin/sessions_app/approvalrequest/"
CHILDREN = ".tool[data-call-id] .children > .child"


def test_children_are_nested_under_the_tool_call_live_and_after_a_reload(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice")
    chat = open_chat(new_page(alice), "ops", "research-b")
    send_message(chat, "research tides and harbours")
    chat.wait_for_function(f"document.querySelectorAll('{CHILDREN}').length === 2")
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")

    def check() -> None:
        chat.wait_for_function(
            f"Array.from(document.querySelectorAll('{CHILDREN}')).every((c) => c.dataset.status === 'completed')"
        )
        goals = sorted(chat.locator(f"{CHILDREN} .child-goal").all_text_contents())
        assert goals == ["harbours", "tides"]
        for goal in goals:
            child = chat.locator(CHILDREN, has_text=goal)
            assert child.locator(".tool .tool-name").all_text_contents() == ["search_notes"]  # its own tool call
            assert f"Findings on {goal}" in child.locator(".msg.assistant").last.text_content()
        assert chat.locator(".tool[data-call-id] > .tool-name").first.text_content() == "research"

    check()
    parent = m.Turn.objects.get(session__key="research-b")
    assert parent.status == "completed" and m.Turn.objects.filter(parent_id=parent.pk).count() == 2
    chat.reload()
    chat.wait_for_selector("#conn[data-state=live]")
    check()


def test_a_childs_approval_answered_in_the_admin_inbox_finishes_child_and_parent(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice2")
    olga = make_user("olga2", staff=True, groups=("operators",))
    chat = open_chat(new_page(alice), "ops", "research-secret")
    send_message(chat, "research secret plans")
    card = chat.wait_for_selector(f"{CHILDREN} .approval[data-state=open]")
    assert "secret plans" in card.query_selector(".approval-prompt").text_content()
    parent = m.Turn.objects.get(session__key="research-secret")
    child = m.Turn.objects.get(parent_id=parent.pk)
    assert (parent.status, parent.waiting, child.status) == ("suspended", 1, "suspended")

    admin = new_page(olga)
    admin.goto(INBOX)
    row = admin.locator("#result_list tbody tr", has_text="secret plans")
    assert row.count() == 1  # the child's request; the parent waiting on it is not listed
    row.get_by_role("link", name="Release the findings on 'secret plans'?").click()
    admin.wait_for_selector("#june-approve")
    admin.click("#june-approve")
    admin.wait_for_selector(".messagelist >> text=Answer recorded")

    chat.wait_for_selector(f"{CHILDREN} .approval[data-state=answered]")
    chat.wait_for_function(f"document.querySelector('{CHILDREN}').dataset.status === 'completed'")
    chat.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    assert "cleared for release" in chat.locator(".msg.assistant").last.text_content()
    parent.refresh_from_db()
    assert parent.status == "completed"
