"""What a newcomer found walking the chat in Chromium, each pinned here: the chat stopped
following a subagent turn (its answer ended 708 px below the view); a parked tool row said
"running, 12 s" and kept counting over "Waiting for an operator to answer" (after a reload too);
the approval card showed the policy's raw JSON; focus fell to <body> after Cancel and Approve,
reaching Approve took a Tab per control of every message, and Escape did nothing; the header
jumped to two rows when the title came and a 200-character title scrolled the page sideways; a
"queued" row flashed on every send to an idle session; another tab kept the old title after a
rename; the list said `suspended` where the chat says "waiting for an answer"; the reset banner
repeated the divider word for word; the approval note's placeholder was cut off; the PDF icon
was an emoji (a box where no emoji font is installed)."""

from __future__ import annotations

import base64
import re
from typing import Any

from tests.attachment_files import pdf
from tests.browser.conftest import DEADLINE_MS, open_chat, send_message, wait_live

COMPLETED = "document.getElementById('turn-status').dataset.status === 'completed'"
AT_END = (
    "(() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight < 5; })()"
)
ACTIVE = "document.activeElement.id || document.activeElement.textContent || document.activeElement.tagName"


def small_page(browser: Any, june_server: Any, user: Any, **size: int) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(user)
    context = browser.new_context(base_url=june_server.url, viewport={"width": 1000, "height": 560, **size})
    context.set_default_timeout(DEADLINE_MS)
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": june_server.url}])
    return context


def test_the_chat_follows_a_subagent_turn_to_its_answer(june_server, make_user, browser):
    alice = make_user("alice")
    context = small_page(browser, june_server, alice)
    try:
        page = context.new_page()
        open_chat(page, "ops", "follow1")
        send_message(page, "research tides and harbours")
        page.wait_for_function(COMPLETED)
        page.wait_for_function("document.querySelectorAll('.msg.assistant:not(.streaming)').length >= 1")
        assert page.evaluate(
            "document.getElementById('log').scrollHeight > document.getElementById('log').clientHeight"
        )
        page.wait_for_function(AT_END, timeout=10_000)
        # a reader who scrolled up stays where they are
        page.evaluate("document.getElementById('log').scrollTop = 0")
        send_message(page, "order mugs")
        page.wait_for_function(COMPLETED + " && document.querySelectorAll('.msg.user').length === 2")
        assert page.evaluate("document.getElementById('log').scrollTop") < 50
    finally:
        context.close()


def test_a_parked_tool_row_waits_without_counting_and_the_card_shows_no_policy_json(june_server, make_user, new_page):
    alice = make_user("alice")
    page = new_page(alice)
    page.clock.install()
    open_chat(page, "ops", "park1")
    send_message(page, "refund order 42 10")
    page.wait_for_selector(".approval[data-answerable=no]")
    for attempt in ("live", "reloaded"):
        page.clock.run_for(15_000)
        states = page.locator(".tool .tool-state").all_text_contents()
        assert not any("running" in s for s in states), (attempt, states)
        assert "waiting for an answer" in states, (attempt, states)
        card = page.locator(".approval").text_content()
        assert "{" not in card and "requested_by" not in card, card
        assert "Waiting for an operator to answer" in card
        page.reload()
        wait_live(page)
        page.wait_for_selector(".approval[data-answerable=no]")


def test_focus_stays_in_the_page_escape_cancels_and_approve_is_one_tab_away(june_server, make_user, new_page):
    olga = make_user("olga", staff=True, groups=("operators",))
    page = open_chat(new_page(olga), "ops", "keys1")
    for n in range(3):  # messages with their controls (copy, edit) between the box and the card
        send_message(page, f"order mugs {n}")
        page.wait_for_function(COMPLETED + f" && document.querySelectorAll('.msg.user').length === {n + 1}")
    send_message(page, "refund order 7 25")
    page.wait_for_selector(".approval[data-answerable=yes]")
    page.focus("#text")
    page.keyboard.press("Tab")
    assert page.evaluate(ACTIVE) == "to-request"
    page.keyboard.press("Enter")
    assert page.evaluate(ACTIVE) == "Approve"
    page.keyboard.press("Enter")
    page.wait_for_selector(".approval[data-outcome=approved]")
    assert page.evaluate(ACTIVE) == "text", "focus fell out of the page after Approve"
    page.wait_for_function(COMPLETED)
    assert page.locator("#to-request").is_hidden()

    # Cancel from the keyboard: the button goes disabled, the cursor goes to the box
    send_message(page, "essay")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'running'")
    page.focus("#cancel")
    page.keyboard.press("Enter")
    page.wait_for_selector('.note >> text="Turn cancelled."')
    assert page.evaluate(ACTIVE) == "text", "focus fell to <body> after Cancel"
    # Escape in the box cancels the running turn
    send_message(page, "essay")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'running'")
    page.focus("#text")
    page.keyboard.press("Escape")
    page.wait_for_function(
        "document.querySelectorAll('.note').length >= 2 && document.getElementById('turn-status').dataset.status === 'cancelled'"
    )
    # Escape in an edit box closes it, back on its Edit button
    page.wait_for_selector(".branch-edit")
    page.locator(".branch-edit").first.click()
    page.wait_for_selector("textarea.branch-text")
    page.keyboard.press("Escape")
    page.wait_for_selector("textarea.branch-text", state="detached")
    assert page.evaluate("document.activeElement.className") == "branch-edit"


def test_the_header_keeps_one_row_and_other_tabs_follow_a_rename(june_server, make_user, new_page):
    alice = make_user("alice")
    page = new_page(alice)
    page.set_viewport_size({"width": 1280, "height": 800})
    open_chat(page, "ops", "head1")
    other = open_chat(new_page(alice), "ops", "head1")
    before = page.locator(".chat-head").bounding_box()["height"]
    send_message(page, "order mugs please, a dozen of the blue ones with the wide handles")
    page.wait_for_function(COMPLETED)
    assert page.locator(".chat-head").bounding_box()["height"] == before, "the header grew a row"
    page.click(".rename summary")
    page.fill(".rename input[name=title]", "T" * 200)
    page.click(".rename button[type=submit]")
    wait_live(page)
    assert page.locator("#session-title").text_content() == "T" * 200
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    assert page.locator(".chat-head").bounding_box()["height"] == before
    other.wait_for_function("document.getElementById('session-title').textContent === 'T'.repeat(200)")


def test_a_send_to_an_idle_session_shows_no_queued_row(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "noflash")
    page.evaluate(
        "window.__queued = 0; new MutationObserver((list) => { for (const m of list) window.__queued += m.addedNodes.length; })"
        ".observe(document.getElementById('queue'), { childList: true })"
    )
    for n in range(3):
        send_message(page, f"stock tea {n}")
        page.wait_for_function(COMPLETED + f" && document.querySelectorAll('.msg.user').length === {n + 1}")
    assert page.evaluate("window.__queued") == 0


def test_one_vocabulary_and_a_reset_banner_that_says_something_else(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "words1")
    send_message(page, "refund order 42 10")
    page.wait_for_selector(".approval[data-answerable=no]")
    assert page.locator("#turn-status").text_content() == "waiting for an answer"
    home = new_page(alice)
    home.goto("/")
    badge = home.locator(".session-row[data-key=words1] .badge").text_content()
    assert badge == "waiting for an answer", badge
    page.once("dialog", lambda d: d.accept())
    page.click("#reset")
    page.wait_for_selector("#notice:not([hidden])")
    banner = page.locator("#notice").text_content()
    divider = page.locator(".reset-divider").text_content()
    assert "words1#g0" in banner and "words1#g0" in divider
    assert divider not in banner and banner.split(".")[0] not in divider, (banner, divider)


def test_the_note_placeholder_shows_whole_and_a_pdf_has_an_icon_of_the_page(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "cuts1")
    send_message(page, "bulk order 50 mugs")
    page.wait_for_selector(".approval.card[data-state=open] input.approval-message")
    fits = page.evaluate(
        """() => {
          const i = document.querySelector('.approval-message');
          const s = getComputedStyle(i);
          const c = document.createElement('canvas').getContext('2d');
          c.font = s.font;
          const room = i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
          return [c.measureText(i.placeholder).width, room];
        }"""
    )
    assert fits[0] <= fits[1], fits
    page.locator(".approval button", has_text="Reject").click()
    page.wait_for_function(COMPLETED)
    page.evaluate(
        """([name, b64]) => {
          const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
          const data = new DataTransfer();
          data.items.add(new File([bytes], name, { type: 'application/pdf' }));
          document.getElementById('text').dispatchEvent(new ClipboardEvent('paste', { bubbles: true, cancelable: true, clipboardData: data }));
        }""",
        ["report.pdf", base64.b64encode(pdf(2)).decode()],
    )
    page.wait_for_selector(".attach-chip[data-state=ready]")
    send_message(page, "here it is")
    link = page.locator(".msg.user .attachment").last
    link.wait_for()
    assert link.locator("svg.doc-icon").count() == 1
    assert not re.search(r"[\U0001F300-\U0001FAFF]", link.text_content())


def test_a_cancel_that_reaches_the_server_after_its_turn_ended_shows_no_error(june_server, make_user, new_page):
    """The random walk found it: Cancel clicked as the turn ended put "the turn has already
    completed" in the page's error line, where it stayed. (The cancel frame is held here until
    the turn has ended, then let through.)"""
    import json
    import time

    alice = make_user("alice")
    page = new_page(alice)
    held: list = []
    received: list[dict] = []

    def route(ws) -> None:
        server = ws.connect_to_server()

        def from_page(message) -> None:
            if json.loads(message).get("type") == "cancel":
                held.append((server, message))
            else:
                server.send(message)

        def from_server(message) -> None:
            received.append(json.loads(message))
            ws.send(message)

        ws.on_message(from_page)
        server.on_message(from_server)

    page.route_web_socket("**/ws/**", route)
    open_chat(page, "ops", "latecancel")
    send_message(page, "wait 2")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'running'")
    page.click("#cancel")
    page.wait_for_function(COMPLETED)
    assert len(held) == 1
    server, message = held[0]
    server.send(message)
    deadline = time.monotonic() + 30
    while not any(f.get("type") == "error" for f in received):
        assert time.monotonic() < deadline, "the server never answered the late cancel"
        page.wait_for_timeout(50)
    page.wait_for_timeout(100)  # the page handles the frame
    assert page.locator("#error").is_hidden(), page.locator("#error").text_content()
    assert page.evaluate("document.activeElement.id") == "text"
