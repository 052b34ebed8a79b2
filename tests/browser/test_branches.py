"""Edit and regenerate in a real Chromium: a regenerated reply and an edited message each make
a branch, the switcher "‹ i/n ›" under the message steps between them, and the branch chosen
is the one a reload shows; another tab follows a switch."""

from __future__ import annotations

from sessions_app import models as m
from tests.browser.conftest import DEADLINE_MS, open_chat, send_message, wait_live


def wait_idle(page) -> None:
    page.wait_for_function("document.querySelector('#turn-status').dataset.status === 'completed'", timeout=DEADLINE_MS)


def ask(page, text: str) -> None:
    send_message(page, text)
    page.wait_for_selector(f".msg.assistant >> text=You said: {text}", timeout=DEADLINE_MS)
    wait_idle(page)


def count(page, index: int) -> str:
    return page.locator(f".branch-bar[data-index='{index}'] .branch-count").inner_text(timeout=DEADLINE_MS)


def test_regenerate_makes_a_branch_to_switch_back_from(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "regen1")
    ask(page, "hello there")
    page.click(".branch-regenerate", timeout=DEADLINE_MS)
    page.wait_for_selector(".branch-bar[data-index='0'] .branch-count >> text=2/2", timeout=DEADLINE_MS)
    session = m.Session.objects.get(key="regen1")
    assert session.generation == 1
    texts = list(
        m.Message.objects.filter(session=session, generation=1).order_by("index").values_list("role", "data__text")
    )
    assert texts[0] == ("user", "hello there") and texts[-1] == ("assistant", "You said: hello there")
    assert m.Turn.objects.filter(session=session, generation=1).count() == 1  # the regenerated turn


def test_edit_then_switch_back_to_the_first_branch_after_a_reload(june_server, make_user, new_page):
    alice = make_user("alice")
    page = open_chat(new_page(alice), "ops", "edit1")
    other = open_chat(new_page(alice), "ops", "edit1")  # a second tab follows the switches
    ask(page, "first question")
    ask(page, "second question")
    bar = page.locator(".branch-bar[data-index='2']")
    bar.locator(".branch-edit").click(timeout=DEADLINE_MS)
    editor = bar.locator("textarea.branch-text")
    assert editor.input_value() == "second question"
    editor.fill("second, edited")
    bar.locator(".branch-save").click()
    # the page reloads on the new branch: the edited message and its reply, not the old ones
    page.wait_for_selector(".msg.assistant >> text=You said: second, edited", timeout=DEADLINE_MS)
    assert count(page, 2) == "2/2"
    assert page.locator(".msg.user", has_text="second question").count() == 0
    assert page.locator(".msg.user", has_text="first question").count() == 1
    assert page.locator("#archive-link").count() == 0  # a branch left is no reset's archive
    other.wait_for_selector(".msg.assistant >> text=You said: second, edited", timeout=DEADLINE_MS)
    # back to the first branch with the switcher
    page.locator(".branch-bar[data-index='2'] button[aria-label='Previous branch']").click()
    page.wait_for_selector(".msg.assistant >> text=You said: second question", timeout=DEADLINE_MS)
    assert count(page, 2) == "1/2"
    page.reload()
    wait_live(page)
    page.wait_for_selector(".msg.user >> text=second question", timeout=DEADLINE_MS)
    assert count(page, 2) == "1/2"
    assert page.locator(".msg", has_text="second, edited").count() == 0
    other.wait_for_selector(".msg.user >> text=second question", timeout=DEADLINE_MS)
    session = m.Session.objects.get(key="edit1")
    assert session.generation == 0 and m.Branch.objects.filter(session=session).count() == 2


def test_a_new_chat_asks_for_no_branches_before_its_first_message(june_server, make_user, new_page):
    """A new chat's session is created by its first message: the branch bar asked
    ``GET …/branches`` as soon as the page was live, a 404 and a console error on every new chat
    (seen clicking New session). It asks once a message is shown, and then gets an answer."""
    alice = make_user("alice")
    page = new_page(alice)
    asked: list[int] = []
    page.on("response", lambda r: asked.append(r.status) if r.url.rstrip("/").endswith("/branches") else None)
    page = open_chat(page, "ops", "fresh1")
    wait_live(page)
    page.wait_for_timeout(1500)  # the bar asks 150 ms after the page is live and idle
    assert asked == [], asked
    ask(page, "hello there")
    page.wait_for_selector(".branch-regenerate", timeout=DEADLINE_MS)
    assert asked and all(status == 200 for status in asked), asked


def test_a_chat_page_requests_nothing_that_is_missing(june_server, make_user, new_page):
    """Every chat page asked for ``/favicon.ico`` (a 404, and a console error on each load), and a
    new chat for its branches (a 404 until its first message): a person with DevTools open saw
    errors on a page that works."""
    page = new_page(make_user("alice"))
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    open_chat(page, "ops", "fresh2")
    ask(page, "hello there")
    page.reload()
    wait_live(page)
    page.wait_for_selector(".branch-regenerate", timeout=DEADLINE_MS)
    assert errors == [], errors
