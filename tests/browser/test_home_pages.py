"""The chat home (issue 40 item 0): a user's sessions of an agent come a page at a time (20,
then "Older sessions →"), and an internal agent (``researcher``, unlisted) shows the user's
sessions of it without offering "New session"."""

from __future__ import annotations


def test_sessions_are_paginated_and_an_internal_agent_offers_no_new_session(june_server, make_user, new_page):
    from sessions_app import models as m

    alice = make_user("alice")
    for i in range(25):
        m.Session.objects.create(agent="ops", key=f"s{i:02d}", owner=alice, title=f"topic {i:02d}")
    m.Session.objects.create(agent="researcher", key="r1", owner=alice, title="a research")
    page = new_page(alice)
    page.goto("/")
    ops = page.locator("section.agent[data-agent=ops]")
    assert ops.locator("li.session-row").count() == 20
    first = ops.locator("li.session-row").all_text_contents()
    assert ops.locator("button.new-session").count() == 1
    assert ops.locator("a.newer").count() == 0
    ops.locator("a.older").click()
    page.wait_for_url("**/?agent=ops&page=2")
    ops = page.locator("section.agent[data-agent=ops]")
    rest = ops.locator("li.session-row").all_text_contents()
    assert len(rest) == 5 and not set(rest) & set(first)
    assert ops.locator("a.older").count() == 0 and ops.locator("a.newer").count() == 1
    shown = {row.get_attribute("data-key") for row in ops.locator("li.session-row").all()}
    assert len(shown) == 5

    researcher = page.locator("section.agent[data-agent=researcher]")
    assert researcher.locator("li.session-row").count() == 1
    assert researcher.locator("button.new-session").count() == 0
    # a bad page number is the first page, not an error
    assert page.goto("/?agent=ops&page=x").status == 200
    assert page.locator("section.agent[data-agent=ops] li.session-row").count() == 20
