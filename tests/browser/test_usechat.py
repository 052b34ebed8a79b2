"""A page built on @ai-sdk/react's useChat (tests/js/usechat-page.jsx, bundled with esbuild from
the pinned npm packages) chats with June in Chromium: the hook's own transport streams a reply
with a tool call, and the reply is the turn June committed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from sessions_app import models as m
from tests.browser.conftest import DEADLINE_MS

JS = Path(__file__).resolve().parents[1] / "js"


def _bundle(tmp_path: Path) -> str:
    out = tmp_path / "usechat.js"
    subprocess.run(
        [
            str(JS / "node_modules" / ".bin" / "esbuild"),
            str(JS / "usechat-page.jsx"),
            "--bundle",
            "--format=esm",
            "--jsx=automatic",
            "--define:process.env.NODE_ENV='production'",
            f"--outfile={out}",
            "--log-level=error",
        ],
        cwd=JS,
        check=True,
        timeout=120,
    )
    return out.read_text()


def _page(june_server, new_page, tmp_path, user, chat: str):
    token = m.ApiToken.issue(user)[1]
    config = {"api": "/api/agents/ops/chat", "chat": chat, "token": token}
    html = (
        '<!doctype html><html><body><div id="root"></div>'
        f"<script>window.JUNE = {json.dumps(config)};</script>"
        f'<script type="module">{_bundle(tmp_path)}</script></body></html>'
    )
    page = new_page()
    url = f"{june_server.url}/__usechat__/"
    # the page is served on June's origin (no CORS needed); its fetches go to the real server
    page.route(url, lambda route: route.fulfill(status=200, content_type="text/html", body=html))
    page.goto(url)
    page.wait_for_selector("#input")
    return page


def test_a_usechat_page_chats_with_june(june_server, make_user, new_page, tmp_path):
    page = _page(june_server, new_page, tmp_path, make_user("alice"), "usechat-1")
    page.fill("#input", "stock mugs")
    page.click("button[type=submit]")
    page.wait_for_selector("li.assistant code.tool[data-state=output-available]", timeout=DEADLINE_MS)
    page.wait_for_function("document.getElementById('status').textContent === 'ready'", timeout=DEADLINE_MS)
    turn = m.Turn.objects.get(session__key="usechat-1")
    reply = page.locator("li.assistant")
    assert reply.get_attribute("data-id") == turn.pk
    assert reply.locator("span.text").last.text_content() == turn.text
    assert page.locator("li.user").text_content() == "stock mugs"


def test_a_usechat_page_reloaded_mid_reply_shows_all_of_it(june_server, make_user, new_page, tmp_path):
    """A reload mid-turn loses nothing: the page starts from June's history and the hook's resume
    request replays the turn under way from the event log, then follows it live."""
    page = _page(june_server, new_page, tmp_path, make_user("alice"), "usechat-2")
    page.fill("#input", "essay")
    page.click("button[type=submit]")
    page.wait_for_function(
        "(document.querySelector('li.assistant span.text')?.textContent || '').length > 40", timeout=DEADLINE_MS
    )
    assert m.Turn.objects.get(session__key="usechat-2").status == "running"  # still streaming
    page.reload()
    page.wait_for_selector("li.user", timeout=DEADLINE_MS)  # the history
    page.wait_for_function(
        "document.getElementById('status').textContent === 'ready' && !!document.querySelector('li.assistant')",
        timeout=DEADLINE_MS,
    )
    turn = m.Turn.objects.get(session__key="usechat-2")
    assert turn.status == "completed"
    assert page.locator("li.user").count() == 1 and page.locator("li.assistant").count() == 1
    assert page.locator("li.assistant span.text").last.text_content() == turn.text
