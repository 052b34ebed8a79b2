"""Issue 40: "A 20,000-character message is accepted without a word on the model's window and then
fails after two compactions." The composer refuses it, naming the model's window, and keeps the
text; a page that does not know the limit (an older page) gets the server's refusal instead."""

from __future__ import annotations

from agents_app.providers.demo import CONTEXT_WINDOW
from sessions_app import models as m
from tests.browser.conftest import open_chat, wait_live

LONG = "word " * 4_000  # 20,000 characters
#: the page's config without the window's limit (as a page served before the limit existed)
FORGET_LIMIT = """
const parse = JSON.parse;
JSON.parse = function (text, ...rest) {
  const value = parse.call(this, text, ...rest);
  if (value && typeof value === "object" && "ws_path" in value) delete value.window_chars;
  return value;
};
"""


def _error(page) -> str:
    page.wait_for_selector("#composer-error:not([hidden])")
    return page.locator("#composer-error").text_content()


def test_a_message_the_model_cannot_read_is_refused_under_the_composer(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "win1")
    page.fill("#text", LONG)
    page.click("#send")
    error = _error(page)
    assert "20,000 characters" in error and f"context window of {CONTEXT_WINDOW:,} tokens" in error, error
    assert page.input_value("#text") == LONG  # kept in the box
    page.fill("#text", "order mugs")  # a message that fits goes, and the refusal clears
    page.click("#send")
    page.wait_for_selector(".msg.user >> text=order mugs")
    assert page.locator("#composer-error").is_hidden()

    # the server refuses it too, in the same words, when the page did not know the limit
    other = new_page(alice)
    other.add_init_script(FORGET_LIMIT)
    open_chat(other, "ops", "win2")
    other.fill("#text", LONG)
    other.click("#send")
    error = _error(other)
    assert "Not sent:" in error and f"{CONTEXT_WINDOW:,} tokens" in error and "at most" in error, error
    assert other.input_value("#text") == LONG
    assert not m.Turn.objects.filter(session__key="win2").exists()
    other.reload()
    wait_live(other)
    assert other.locator(".msg.user").count() == 0
