"""Every control of the chat page clicked in random order, in two tabs of one session (send,
attach, Regenerate, Edit, branch switch, Cancel, Reset): no page reloads in a loop (loads are
counted per tab, and each reload's cause is named and never repeated), no console error, no
uncaught exception, no 5xx, and when the session is idle again both tabs show the same
conversation as the server's live branch. (Regenerate twice used to reload every tab about five
times a second, forever.) ``JUNE_WALK_SEED`` replays a walk; ``JUNE_WALK_STEPS`` lengthens it."""

from __future__ import annotations

import os
import random
import re
from typing import Any, Callable

from sessions_app import models as m
from tests.attachment_files import png
from tests.browser.conftest import DEADLINE_MS, open_chat, wait_live
from tests.fault.qcluster import wait_for

STEPS = int(os.environ.get("JUNE_WALK_STEPS", "30"))
TEXTS = ["order mugs", "stock tea", "hello there", "wait 2", "essay", "what is 2 + 2?"]
#: a refused request is the page's business (a 409 while a turn runs), not a console error of ours
REFUSED = re.compile(r"Failed to load resource: the server responded with a status of 4\d\d")
IDLE = "['completed', 'failed', 'cancelled', 'idle', 'new'].includes(document.getElementById('turn-status').dataset.status)"


class Tab:
    def __init__(self, name: str, page: Any) -> None:
        self.name, self.page = name, page
        self.loads = 0
        self.problems: list[str] = []
        page.on("load", lambda p: self._loaded())
        page.on("pageerror", lambda e: self.problems.append(f"{name}: uncaught {e}"))
        page.on("console", self._console)
        page.on("response", self._response)
        page.on("dialog", lambda d: d.accept())

    def _loaded(self) -> None:
        self.loads += 1

    def _console(self, msg: Any) -> None:
        if msg.type == "error" and not REFUSED.search(msg.text):
            self.problems.append(f"{self.name}: console error {msg.text}")

    def _response(self, response: Any) -> None:
        if response.status >= 500:
            self.problems.append(f"{self.name}: {response.status} from {response.url}")


def _try(click: Callable[[], Any]) -> bool:
    """A control that went away meanwhile (the other tab changed the session, the page is
    reloading): not an error. ``click`` returning False: there was nothing to click."""
    from playwright.sync_api import Error

    try:
        return click() is not False
    except Error:
        return False


def _actions(tab: Tab, rng: random.Random) -> dict[str, Callable[[], bool]]:
    page = tab.page

    def send() -> bool:
        text = rng.choice(TEXTS)
        return _try(lambda: (page.fill("#text", text, timeout=2000), page.press("#text", "Enter", timeout=2000)))

    def attach() -> bool:
        files = [{"name": f"dot{rng.randrange(99)}.png", "mimeType": "image/png", "buffer": png(3, 3)}]
        return _try(lambda: page.set_input_files("#attach-input", files=files, timeout=2000))

    def visible(selector: str) -> Any:
        found = page.locator(selector)
        n = found.count()
        return found.nth(rng.randrange(n)) if n else None

    def click(selector: str) -> Callable[[], bool]:
        def act() -> Any:
            target = visible(selector)
            return target is not None and target.click(timeout=2000) is None

        return lambda: _try(act)

    def edit_once() -> Any:
        target = visible(".branch-edit")
        if target is None:
            return False
        target.click(timeout=2000)
        page.fill("textarea.branch-text", f"edited {rng.randrange(1000)}", timeout=2000)
        page.click(".branch-save", timeout=2000)
        return True

    def edit() -> bool:
        return _try(edit_once)

    return {
        "send": send,
        "attach": attach,
        "regenerate": click(".branch-regenerate"),
        "edit": edit,
        "switch": click(".branch-switch button:not(:disabled)"),
        "cancel": click("#cancel:not(:disabled)"),
        "reset": click("#reset"),
    }


def _conversation(page: Any) -> list[tuple[str, str]]:
    return page.evaluate(
        """() => [...document.querySelectorAll('#log > .msg:not(.discarded)')].map((n) => [
              n.classList.contains('assistant') ? 'assistant' : 'user',
              [...n.childNodes].filter((c) => c.nodeType === 3 || !c.matches('.copy-reply, .attachments'))
                .map((c) => c.textContent).join('').trim()])"""
    )


def test_random_clicks_in_two_tabs_never_loop_nor_break(june_server, make_user, new_page):
    seed = int(os.environ.get("JUNE_WALK_SEED", random.randrange(1_000_000)))
    print(f"JUNE_WALK_SEED={seed}")
    rng = random.Random(seed)
    alice = make_user("alice")
    tabs = [Tab(name, new_page(alice)) for name in ("first", "second")]
    for tab in tabs:
        open_chat(tab.page, "ops", "walk1")
    tabs[0].page.fill("#text", "hello")
    tabs[0].page.press("#text", "Enter")
    tabs[0].page.wait_for_selector(".msg.assistant >> text=You said: hello", timeout=DEADLINE_MS)
    done: list[str] = []
    weights = {"send": 5, "attach": 1, "regenerate": 3, "edit": 2, "switch": 2, "cancel": 2, "reset": 1}
    for _ in range(STEPS):
        tab = rng.choice(tabs)
        actions = _actions(tab, rng)
        name = rng.choices(list(weights), weights=list(weights.values()))[0]
        if actions[name]():
            done.append(f"{tab.name}:{name}")
        tab.page.wait_for_timeout(rng.choice([0, 100, 400, 1200]))  # the pace of a person clicking
    print("walk:", " ".join(done))

    # the session settles: nothing queued or running (cancel what a last click left parked)
    wait_for(
        lambda: not m.Turn.objects.filter(session__key="walk1", status__in=("queued", "running")).exists(),
        timeout=120,
        interval=0.2,
        what="the walk's turns to end",
    )
    for tab in tabs:
        wait_live(tab.page)
        tab.page.wait_for_function(IDLE, timeout=DEADLINE_MS)
    loads = [tab.loads for tab in tabs]
    tabs[0].page.wait_for_timeout(4000)  # a window to see reloads that should not come
    assert [tab.loads for tab in tabs] == loads, "a tab went on reloading by itself"
    branch_moves = sum(1 for d in done if d.split(":")[1] in ("regenerate", "edit", "switch"))
    for tab in tabs:
        causes = [r["cause"] for r in tab.page.evaluate("JSON.parse(sessionStorage.getItem('june:reloads') || '[]')")]
        automatic = [c for c in causes if c.startswith(("branch.switched", "g"))]
        assert len(automatic) == len(set(automatic)), (tab.name, causes)
        assert tab.loads <= branch_moves + 1, (tab.name, tab.loads, done)
        assert tab.page.locator("#error").is_hidden(), tab.page.locator("#error").text_content()
    problems = [p for tab in tabs for p in tab.problems]
    assert problems == [], problems

    # both tabs show the server's live branch: its messages in order (a reply's Markdown is
    # compared by count: its text on the page is rendered)
    session = m.Session.objects.get(key="walk1")
    rows = m.Message.objects.filter(session=session, generation=session.generation).order_by("index")
    expected = [
        (row.role, (row.data or {}).get("text", "") if row.role == "user" else "")
        for row in rows
        if row.role in ("user", "assistant") and (row.data or {}).get("text")
    ]
    shown = []
    for tab in tabs:
        tab.page.wait_for_function(
            "(n) => document.querySelectorAll('#log > .msg:not(.discarded):not(.streaming)').length >= n",
            arg=len(expected),
            timeout=DEADLINE_MS,
        )
        shown.append(_conversation(tab.page))
        assert [(role, text if role == "user" else "") for role, text in shown[-1]] == expected, (tab.name, done)
    assert shown[0] == shown[1]
