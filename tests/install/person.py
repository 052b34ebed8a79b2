"""What a person does with a host project built from docs/install.md: log in through the login
page the page gives, chat in Chromium (static files, websocket), use the API with a token, and
answer a parked call in the admin as an operator."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.attachment_files import png
from tests.install.host import OPERATOR, Host

USER = {"username": "alice", "email": "alice@example.com", "password": "alice-pw-3907"}


def make_user(host: Host, fields: dict[str, str] = USER) -> None:
    """An ordinary user of the host (not staff): a host has its users already."""
    host.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model\n"
        "U = get_user_model()\n"
        f"f = {json.dumps(fields)}\n"
        "kw = {U.USERNAME_FIELD: f[U.USERNAME_FIELD]}\n"
        "if U.USERNAME_FIELD != 'email' and hasattr(U, 'email'): kw['email'] = f['email']\n"
        "U.objects.create_user(**kw, password=f['password'])",
    )


def watch_static(page: Any, where: str = "/static/") -> list[tuple[str, int]]:
    """Every static file the page asks for (URLs holding ``where``), with its status (filled as
    responses arrive)."""
    seen: list[tuple[str, int]] = []
    page.on("response", lambda r: seen.append((r.url, r.status)) if where in r.url else None)
    return seen


def log_in(page: Any, start: str, login_path: str, username: str, password: str) -> None:
    """Open ``start`` logged out: its redirect goes to ``login_path``, whose form lets us in."""
    page.goto(start)
    assert login_path in page.url, f"{start} sent a logged-out person to {page.url}, not {login_path}"
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("[type=submit]")
    page.wait_for_url(lambda url: login_path not in url)


def chat(page: Any, prefix: str, agent: str, text: str) -> tuple[str, float]:
    """New session under ``agent`` from the sessions page, send ``text``; the answered reply
    and the seconds from send to answer."""
    page.goto(prefix or "/")
    page.click(f"[data-agent={agent}] .new-session")
    page.wait_for_selector("#conn[data-state=live]")
    hint = page.locator("#composer-hint")  # the agent's "Try: …" words, under the composer
    composer = page.locator("#text").get_attribute("placeholder") + (hint.text_content() if hint.count() else "")
    assert "stock tea" not in composer, f"the host's agent suggests the demo's commands: {composer!r}"
    sent = time.monotonic()
    page.fill("#text", text)
    page.click("#send")
    page.wait_for_function("document.getElementById('turn-status').dataset.status === 'completed'")
    answered = time.monotonic() - sent
    return page.locator(".msg.assistant").last.text_content(), answered


def api(host: Host, prefix: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=host.base + prefix, headers={"Authorization": f"Bearer {token}"}, timeout=90)


def wait_status(client: httpx.Client, path: str, status: str, timeout: float = 60) -> str:
    deadline, now = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        now = client.get(path).json()["status"]
        if now == status:
            break
        time.sleep(0.2)
    return now


def approve_in_admin(page: Any, admin: str, turn_id: str, login: str = OPERATOR["username"]) -> None:
    """The operator logs in to the host's admin and approves the parked call from the inbox."""
    log_in(page, admin, f"{admin}login/", login, OPERATOR["password"])
    page.goto(f"{admin}sessions_app/approvalrequest/")
    page.click(f"a[href*='{turn_id}']")
    page.click("#june-approve")
    page.wait_for_load_state()


def swagger(page: Any, prefix: str) -> None:
    """The API's docs page renders its operations (Swagger UI's files load)."""
    page.goto(f"{prefix}api/docs/")
    page.wait_for_selector(".swagger-ui .opblock")


def features(client: httpx.Client, session: str = "f1") -> None:
    """What else a host's user reaches over the API: a turn with an attachment, search over
    their messages, a fork (edit) of a sent message, the session's export."""
    api = f"api/agents/clerk/sessions/{session}/"
    up = client.post(api + "attachments", files={"file": ("dot.png", png(), "image/png")})
    assert up.status_code == 201, up.text
    turn = client.post(api + "turns", json={"text": "order 3 plates", "attachments": [up.json()["id"]]})
    assert turn.status_code == 200 and turn.json()["status"] == "completed", turn.text
    assert client.get(api + f"attachments/{up.json()['id']}").content == png()
    found = client.get("api/search", params={"q": "plates"})
    assert found.status_code == 200 and {r["session"] for r in found.json()["results"]} == {session}, found.text
    fork = client.post(api + "messages/0/fork", json={"text": "order 4 bowls"})
    assert fork.status_code == 202 and fork.json()["generation"] == 1, fork.text
    forked = f"{api}turns/{fork.json()['turn_id']}"
    assert wait_status(client, forked, "completed") == "completed"
    export = client.get(api + "export", params={"format": "md"})
    assert export.status_code == 200 and "bowls" in export.text, export.text[:300]


def run_schedule_now(page: Any, admin: str) -> None:
    """The operator (logged in to the admin) presses the schedule's Run now."""
    page.goto(f"{admin}agents_app/agentschedule/")
    page.click(".june-run-now")
    page.wait_for_load_state()


def wait_turns(client: httpx.Client, session_api: str, timeout: float = 90) -> list[dict]:
    """The session's turns once one has completed (a schedule's run is due within ~30 s)."""
    deadline, turns = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        r = client.get(session_api + "turns")
        turns = r.json().get("turns", []) if r.status_code == 200 else []
        if any(t.get("status") == "completed" for t in turns):
            break
        time.sleep(0.5)
    return turns
