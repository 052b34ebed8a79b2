"""The chat never reloads itself in a loop: Regenerate twice (or Edit, then Regenerate) made the
page reload about five times a second, forever, in every tab that opened the session — the new
branch replayed a copy of the older branch's ``branch.switched`` and ``branches.js`` reloaded on
it although it was a replay. Each reload a page makes by itself names its cause
(sessionStorage ``june:reloads``)."""

from __future__ import annotations

from typing import Any

from sessions_app import models as m
from tests.browser.conftest import DEADLINE_MS, open_chat, send_message, wait_live

QUIET_MS = 5_000  # a window to see reloads that should not come (the loop was 5/s and every 2 s)


def wait_idle(page: Any) -> None:
    page.wait_for_function(
        "document.querySelector('#turn-status').dataset.status === 'completed'"
        " && document.querySelector('.branch-regenerate')",
        timeout=DEADLINE_MS,
    )


def count_loads(page: Any) -> list[str]:
    loads: list[str] = []
    page.on("load", lambda p: loads.append(p.url))
    return loads


def reloads(page: Any) -> list[dict]:
    """The reloads this tab made, with their causes (branches.js keeps them)."""
    return page.evaluate("JSON.parse(sessionStorage.getItem('june:reloads') || '[]')")


def regenerate(page: Any, branches: int) -> None:
    page.click(".branch-regenerate", timeout=DEADLINE_MS)
    page.wait_for_selector(f".branch-bar[data-index='0'] .branch-count >> text={branches}/{branches}")
    wait_idle(page)


def test_two_regenerates_and_an_edit_then_regenerate_load_each_tab_once(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "loop1")
    other = open_chat(new_page(alice), "ops", "loop1")
    send_message(page, "hello")
    page.wait_for_selector(".msg.assistant >> text=You said: hello")
    wait_idle(page)
    regenerate(page, 2)
    regenerate(page, 3)
    bar = page.locator(".branch-bar[data-index='0']")
    bar.locator(".branch-edit").click()
    bar.locator("textarea.branch-text").fill("hello, edited")
    bar.locator(".branch-save").click()
    page.wait_for_selector(".msg.assistant >> text=You said: hello, edited")
    wait_idle(page)
    regenerate(page, 5)
    generation = m.Session.objects.get(key="loop1").generation
    # the live branch's log holds its own switch only (the server copies none into a fork)
    switched = m.Event.objects.filter(session__key="loop1", generation=generation, type="branch.switched")
    assert [e.data["generation"] for e in switched] == [generation]
    other.wait_for_selector(".msg.user >> text=hello, edited")

    loads = {name: count_loads(tab) for name, tab in (("page", page), ("other", other))}
    for tab in (page, other):
        tab.reload()
        wait_live(tab)
        tab.wait_for_selector(".msg.assistant >> text=You said: hello, edited")
    before = {name: len(reloads(tab)) for name, tab in (("page", page), ("other", other))}
    page.wait_for_timeout(QUIET_MS)
    assert {name: len(urls) for name, urls in loads.items()} == {"page": 1, "other": 1}
    assert {name: len(reloads(tab)) for name, tab in (("page", page), ("other", other))} == before
    # the other tab followed each fork once, each for its own generation: no cause twice
    causes = [r["cause"] for r in reloads(other)]
    assert len(causes) == len(set(causes)) and all(c.startswith("branch.switched to g") for c in causes), causes
    for tab in (page, other):
        assert tab.evaluate("document.querySelector('#error').hidden")


def test_switching_back_and_forth_is_followed_each_time_in_the_other_tab(june_server, make_user, new_page):
    """Switching g0 → g1 → g0 → g1 within a minute names each generation twice: the other tab
    follows every switch (a loop guard keyed on the generation alone refused the third, and the
    tab said "Another branch of this conversation is live")."""
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "loop2")
    other = open_chat(new_page(alice), "ops", "loop2")
    send_message(page, "hello")
    page.wait_for_selector(".msg.assistant >> text=You said: hello")
    wait_idle(page)
    regenerate(page, 2)
    count = ".branch-bar[data-index='0'] .branch-count"
    other.wait_for_selector(f"{count} >> text=2/2", timeout=DEADLINE_MS)
    for button, shown in (
        ("Previous branch", "1/2"),
        ("Next branch", "2/2"),
        ("Previous branch", "1/2"),
        ("Next branch", "2/2"),
    ):
        page.click(f".branch-bar[data-index='0'] [aria-label='{button}']", timeout=DEADLINE_MS)
        page.wait_for_selector(f"{count} >> text={shown}", timeout=DEADLINE_MS)
        other.wait_for_selector(f"{count} >> text={shown}", timeout=DEADLINE_MS)
    causes = [r["cause"] for r in reloads(other)]
    assert len(causes) == 5 and len(set(causes)) == 5, causes  # the regenerate, then four switches
    assert other.evaluate("document.querySelector('#error').hidden")
