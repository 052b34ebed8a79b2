"""Search and export in the browser (issue 40 item 4), Chromium against a real daphne + cluster:
type in the session list's search box, see the match highlighted, open the hit and land on that
message (scrolled to and flashed, not at the end of a long session); download the conversation
as Markdown and JSON from the chat header."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from tests.browser.conftest import wait_live
from tests.fault.qcluster import wait_for

FILLER = "filler line about nothing in particular\n" * 6


def _seed(user: Any) -> None:
    """A long session whose first message says "kumquat" (its reply repeats it), then enough
    turns that the chat opens far below it. Started off Playwright's thread (its event loop
    forbids async_to_sync there) and run by the test's cluster, as a site runs them; the test
    goes on once all fifteen have completed (a start returns when its turn is queued)."""
    from agents_app.runtime.records import TurnStatus
    from sessions_app import models as m
    from sessions_app import services

    errors: list[Exception] = []

    def run() -> None:
        try:
            services.turn_start(agent="ops", key="long1", text="the Kumquat harvest is late this year", user=user)
            for n in range(14):
                services.turn_start(agent="ops", key="long1", text=f"message {n}\n{FILLER}", user=user)
        except Exception as exc:  # noqa: BLE001 (reported in the test's thread)
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    assert not worker.is_alive() and not errors, errors
    wait_for(
        lambda: m.Turn.objects.filter(session__key="long1", status=TurnStatus.COMPLETED).count() == 15,
        timeout=120,
        interval=0.1,
        what="the cluster to complete the long session's fifteen turns",
    )


def _in_view(page: Any, selector: str) -> bool:
    return page.evaluate(
        """(sel) => { const n = document.querySelector(sel), l = document.getElementById('log');
        const a = n.getBoundingClientRect(), b = l.getBoundingClientRect();
        return a.bottom > b.top && a.top < b.bottom; }""",
        selector,
    )


def test_search_open_a_hit_at_its_message_and_export(june_server, make_user, new_page):
    alice = make_user("alice")
    _seed(alice)
    page = new_page(alice)
    page.goto("/")
    page.fill("#search-q", "kumquat")
    page.press("#search-q", "Enter")
    page.wait_for_selector(".hit mark")
    assert {t.lower() for t in page.locator(".hit mark").all_text_contents()} == {"kumquat"}
    assert page.locator(".hit").count() == 2  # the message and the reply that repeats it

    # the person's own message: the chat opens at it, far above the end, and marks it
    page.locator(".hit[data-index='0'] .hit-link").click()
    wait_live(page)
    page.wait_for_selector("#m0.found")
    assert "Kumquat harvest" in page.locator("#m0").text_content()
    assert page.locator("#m0").get_attribute("class").split()[:2] == ["msg", "user"]
    assert _in_view(page, "#m0")
    assert (
        page.evaluate(
            "(() => { const l = document.getElementById('log');"
            " return l.scrollHeight - l.scrollTop - l.clientHeight; })()"
        )
        > 500
    )

    # the reply: an assistant message, found by the index its bubble carries
    page.goto("/?q=kumquat")
    reply = page.locator(".hit").filter(has_text="You said").first
    index = reply.get_attribute("data-index")
    reply.locator(".hit-link").click()
    wait_live(page)
    page.wait_for_selector(f"#m{index}.found.assistant")
    assert _in_view(page, f"#m{index}")

    # downloads from the chat header
    with page.expect_download() as info:
        page.click("#export-md")
    md = info.value
    assert md.suggested_filename == "ops-long1-g0.md"
    text = Path(md.path()).read_text(encoding="utf-8")
    assert text.startswith("# the Kumquat harvest is late this year") and "## Assistant" in text
    assert "message 13" in text
    with page.expect_download() as info:
        page.click("#export-json")
    doc = json.loads(Path(info.value.path()).read_text(encoding="utf-8"))
    assert info.value.suggested_filename == "ops-long1-g0.json"
    assert doc["messages"][0]["text"] == "the Kumquat harvest is late this year" and doc["live"] is True
    assert [m["role"] for m in doc["messages"][:2]] == ["user", "assistant"]
