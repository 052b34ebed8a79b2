"""Paper cuts of the chat found by last round's walkers, in a real Chromium.

- At 375 px wide (a phone) the composer's hint, the agent's "try: …" words in the textarea's
  placeholder, was cut off after two lines: the hints now show in a line of their own, whole.
- During an operator's takeover the chat kept its Edit and Regenerate buttons, and pressing one
  answered 409 (no turn starts while a person answers): they are gone while the takeover holds the
  session, the banner says why, and they come back at the hand back.
"""

from __future__ import annotations

import concurrent.futures

from django.db import connections

from tests.browser.conftest import DEADLINE_MS, open_chat, send_message


def off_playwrights_thread(call, **kwargs):
    """A service call on a thread of its own: Playwright's event loop forbids async_to_sync here."""

    def run():
        try:
            return call(**kwargs)
        finally:
            connections.close_all()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


FITS = """() => {
  const box = document.getElementById('text');
  const s = getComputedStyle(box);
  const c = document.createElement('canvas').getContext('2d');
  c.font = s.font;
  const width = box.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  const lines = Math.floor((box.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom)) / parseFloat(s.lineHeight));
  return [c.measureText(box.placeholder).width, width * lines * 0.85];
}"""


def test_the_composers_hint_shows_whole_on_a_phone(june_server, make_user, new_page):
    page = new_page(make_user("alice"))
    page.set_viewport_size({"width": 375, "height": 740})
    open_chat(page, "ops", "narrow1")
    placeholder, room = page.evaluate(FITS)
    assert placeholder <= room, (placeholder, room, page.locator("#text").get_attribute("placeholder"))
    hint = page.locator("#composer-hint")
    assert "order mugs" in hint.inner_text() and "research tides and harbours" in hint.inner_text()
    box = hint.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 375, box
    assert hint.evaluate("e => e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375  # nothing pushes the page sideways
    # once the conversation has begun the hints make room for it
    send_message(page, "hello there")
    page.wait_for_selector(".msg.assistant >> text=You said: hello there", timeout=DEADLINE_MS)
    assert not hint.is_visible()


def test_edit_and_regenerate_are_gone_while_a_person_answers(june_server, make_user, new_page):
    from sessions_app import models as m
    from sessions_app import takeover

    alice = make_user("alice")
    olga = make_user("olga", staff=True, groups=("operators",))
    page = open_chat(new_page(alice), "ops", "held1")
    send_message(page, "hello there")
    page.wait_for_selector(".branch-regenerate", timeout=DEADLINE_MS)
    assert page.locator(".branch-edit").count() == 1

    session = m.Session.objects.get(key="held1")
    off_playwrights_thread(takeover.takeover_begin, session=session, user=olga)
    page.wait_for_selector("#notice[data-takeover]", timeout=DEADLINE_MS)
    page.wait_for_function("!document.querySelector('.branch-bar')", timeout=DEADLINE_MS)
    assert "Edit and Regenerate" in page.locator("#notice").inner_text()

    off_playwrights_thread(takeover.takeover_end, session=session, user=olga)
    page.wait_for_selector(".branch-regenerate", timeout=DEADLINE_MS)
    assert page.locator(".branch-edit").count() == 1
