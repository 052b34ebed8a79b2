"""Compaction in the chat: the divider "N earlier messages summarized" appears live when the
demo model's small window fills, expands to the summary, and comes back on reload; it stands
before the first message the model still reads (it appeared below the reply it precedes)."""

from __future__ import annotations

from tests.browser.conftest import open_chat, send_message

AFTER_DIVIDER = "document.querySelector('details.compaction').nextElementSibling.className"
LONG = " ".join(f"word{n}" for n in range(170))  # ~1,000 characters: three exchanges fill the window


def test_the_divider_appears_live_and_expands_to_the_summary(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "long-chat")
    for n in range(3):
        send_message(page, f"{n}: {LONG}")
        page.wait_for_function(
            f"document.querySelectorAll('.msg.assistant:not(.streaming)').length === {n + 1}"
            " && document.getElementById('turn-status').dataset.status === 'completed'",
            timeout=60_000,
        )
    divider = page.locator("details.compaction")
    divider.wait_for(timeout=30_000)
    assert divider.count() == 1
    title = divider.locator("summary").text_content()
    assert title.endswith("earlier messages summarized") and int(title.split()[0]) >= 2
    summary = divider.locator(".compaction-summary")
    assert not summary.is_visible()
    divider.locator("summary").click()
    assert summary.is_visible() and summary.text_content().startswith("Earlier in this conversation")
    # every original message is still on the page; the divider stands where the kept part
    # begins: before the exchange the model still reads, not below the reply it came after
    assert page.locator(".msg.user").count() == 3
    assert page.evaluate(AFTER_DIVIDER) == "msg user", "the divider is not before the kept exchange"
    # on reload the divider comes back from the event log
    page.reload()
    page.wait_for_selector("#conn[data-state=live]")
    page.locator("details.compaction").wait_for()
    assert page.locator("details.compaction summary").text_content() == title
    assert page.evaluate(AFTER_DIVIDER) == "msg user"
