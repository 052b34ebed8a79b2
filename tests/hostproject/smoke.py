"""The host project's smoke test, run as a new team would: migrate, start daphne and a worker,
and drive June through the host's own URLs (``/assistant/``), websocket and admin (``/staff/``).

    python smoke.py            # from this folder's parent on PYTHONPATH, with June installed
    HOST_SETTINGS=hostproject.settings_uuid python smoke.py   # a user model keyed by a UUID

Used by tests/integration/test_hostproject.py (against the checkout) and by .ci/run's wheel step
(against the built wheel in a fresh virtual environment, no repository on the path). It prints
one line per check and exits 1 on the first that fails. DATABASE_URL picks PostgreSQL;
HOST_SETTINGS the settings module (``settings_uuid``, ``settings_str``: the same host with a user
model keyed by a UUID or a string)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import httpx
import websockets

HERE = Path(__file__).resolve().parent
PARENT = HERE.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOGS: list[Path] = []


def check(ok: bool, what: str) -> None:
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        for log in LOGS:  # what the server said, for whoever reads the failure
            if log.exists():
                print(f"--- {log.name} (last 4,000 characters)\n{log.read_text(errors='replace')[-4000:]}", flush=True)
        raise SystemExit(1)


class Host:
    def __init__(self) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="june-host-"))
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("HOST_SETTINGS", "hostproject.settings"),
            "HOST_VAR_DIR": str(self.var),
            "PYTHONPATH": os.pathsep.join([str(PARENT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "JUNE_DEMO_DELAY": "0",
            "JUNE_Q_NAME": f"host-{os.getpid()}",
        }
        for name in ("JUNE_AGENT_DIRS", "JUNE_DEMO_AGENTS"):
            self.env.pop(name, None)  # nothing of June's own site
        self.procs: list[subprocess.Popen] = []
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, str(HERE / "manage.py"), *args],
            env=self.env,
            cwd=self.var,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if out.returncode != 0:
            raise SystemExit(f"manage.py {' '.join(args[:2])} failed:\n{out.stdout}\n{out.stderr[-4000:]}")
        return out.stdout

    def shell(self, code: str) -> object:
        return json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])

    def start(self) -> None:
        LOGS[:] = [self.var / "daphne.log", self.var / "worker.log"]
        log = open(self.var / "daphne.log", "wb")
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "hostproject.asgi:application",
                ],
                env=self.env,
                cwd=self.var,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        wlog = open(self.var / "worker.log", "wb")
        self.procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / "manage.py"), "june_worker"],
                env=self.env,
                cwd=self.var,
                stdout=wlog,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(self.base + "/assistant/api/openapi.json", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit("daphne did not start:\n" + (self.var / "daphne.log").read_text()[-3000:])

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(self.var, ignore_errors=True)


SETUP = """
import json
from django.contrib.auth import get_user_model
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from sessions_app.models import ApiToken
Member = get_user_model()
alice = Member.objects.create_user("alice@shop.test", "alice-pw")
bob = Member.objects.create_user("bob@shop.test", "bob-pw", is_staff=True, is_superuser=True)
s = SessionStore()
s[SESSION_KEY] = str(alice.pk); s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
s[HASH_SESSION_KEY] = alice.get_session_auth_hash(); s.create()
print(json.dumps({"token": ApiToken.issue(alice, name="smoke")[1], "bob_token": ApiToken.issue(bob, name="smoke")[1],
                  "cookie": s.session_key, "alice": str(alice.pk)}))
"""

PURCHASES = "import json; from hostproject.shop.models import Purchase; print(json.dumps(Purchase.objects.count()))"


def turn(http: httpx.Client, text: str) -> dict:
    r = http.post("/assistant/api/agents/clerk/sessions/s1/turns", json={"text": text}, timeout=60)
    check(r.status_code in (200, 202), f"POST turn {text!r} -> {r.status_code} {r.text[:500]}")
    return r.json()


async def websocket_replay(host: Host, cookie: str) -> list[dict]:
    url = f"ws://127.0.0.1:{host.port}/assistant/ws/agents/clerk/sessions/s1/?after=0"
    frames = []
    async with websockets.connect(
        url, additional_headers={"Cookie": f"sessionid={cookie}", "Origin": host.base}, open_timeout=20
    ) as ws:
        while True:
            try:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 3)))
            except TimeoutError:
                return frames


END = ("turn.completed", "turn.failed", "turn.cancelled")


async def websocket_turn(host: Host, cookie: str, text: str) -> list[dict]:
    """Start a turn over the session's websocket; the frames until it ends (or an error frame)."""
    url = f"ws://127.0.0.1:{host.port}/assistant/ws/agents/clerk/sessions/s1/"
    frames: list[dict] = []
    async with websockets.connect(
        url, additional_headers={"Cookie": f"sessionid={cookie}", "Origin": host.base}, open_timeout=20
    ) as ws:
        await ws.send(json.dumps({"type": "start", "text": text, "id": "w1"}))
        turn_id = None  # the replay of the session's earlier turns comes first
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
            frames.append(frame)
            if frame.get("type") == "error" or (frame.get("type") == "ack" and frame.get("id") == "w1"):
                turn_id = frame.get("turn_id")
            if frame.get("type") == "error" or (turn_id and frame.get("turn_id") == turn_id and frame["type"] in END):
                return frames


def png() -> bytes:
    """A 2x2 PNG, made here (the smoke script runs without the repository's test helpers)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes((200, 30, 30)) * 2 for _ in range(2))
    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def main() -> None:
    host = Host()
    try:
        host.manage("migrate", "-v0")
        check(
            True,
            "migrate: the host's tables and June's, on "
            + ("PostgreSQL" if os.environ.get("DATABASE_URL") else "SQLite"),
        )
        creds = host.shell(SETUP)
        host.start()
        api = httpx.Client(base_url=host.base, headers={"Authorization": f"Bearer {creds['token']}"})

        done = turn(api, "order 2 mugs")
        check(done["status"] == "completed", f"a turn through /assistant/api/ completes ({done['status']})")
        check(host.shell(PURCHASES) == 1, "its def tool wrote one row of the host's own model")
        r = api.get(f"/assistant/api/agents/clerk/sessions/s1/turns/{done['turn_id']}")
        check(r.status_code == 200 and r.json()["status"] == "completed", "the turn reads back under the prefix")

        failed = turn(api, "flaky")
        check(failed["status"] == "completed", "a turn whose def tool raises ends (the model reads the error)")
        check(host.shell(PURCHASES) == 1, "the raising tool's row rolled back with its step")

        queued = api.post("/assistant/api/agents/clerk/sessions/s2/turns?wait=false", json={"text": "hello"})
        check(
            queued.status_code == 202 and queued.headers["Location"].startswith("/assistant/api/agents/clerk/"),
            f"a 202's Location carries the prefix ({queued.headers.get('Location')})",
        )
        # the creation checks the session's owner itself (the user model's key compared as text)
        bobs = httpx.Client(base_url=host.base, headers={"Authorization": f"Bearer {creds['bob_token']}"})
        refused = bobs.post("/assistant/api/agents/clerk/sessions/s2/turns?wait=false", json={"text": "mine now"})
        check(
            refused.status_code == 403 and refused.json()["error"]["message"] == "this session belongs to another user",
            f"another member's start in alice's session is refused ({refused.status_code} {refused.text[:200]})",
        )

        web = httpx.Client(base_url=host.base, cookies={"sessionid": creds["cookie"]})
        page = web.get("/assistant/agents/clerk/sessions/s1/")
        check(page.status_code == 200, f"the chat page under /assistant/ ({page.status_code})")
        check('id="host-layout"' in page.text, "it renders in the host's own base template")
        check(
            'type="module"' in page.text and "june/chat/main.js" in page.text,
            "the chat's script (an ES module) comes with it (the host's base has none of June's tags)",
        )
        check(
            '"/assistant/ws/agents/clerk/sessions/s1/"' in page.text and '"/assistant/api/"' in page.text,
            "its websocket and API URLs carry the prefix",
        )
        home = web.get("/assistant/")
        check(
            home.status_code == 200 and "/assistant/agents/clerk/sessions/s1/" in home.text,
            "the session list links under the prefix",
        )
        check(
            "/assistant/agents/clerk/sessions/new" in home.text and "/agents/ops/" not in home.text,
            "the host's agent is offered, June's demo agents are not",
        )

        frames = asyncio.run(websocket_replay(host, creds["cookie"]))
        kinds = {f.get("type") for f in frames}
        check(
            "turn.completed" in kinds and "ready" in kinds,
            f"the websocket under /assistant/ws/ replays the session ({len(frames)} frames: {sorted(map(str, kinds))[:5]})",
        )

        frames = asyncio.run(websocket_turn(host, creds["cookie"], "order 1 plate"))
        check(
            frames[-1]["type"] == "turn.completed",
            f"a turn started over the websocket completes ({frames[-1]})",
        )

        up = api.post(
            "/assistant/api/agents/clerk/sessions/s1/attachments", files={"file": ("mug.png", png(), "image/png")}
        )
        check(up.status_code == 201, f"an upload is stored ({up.status_code} {up.text[:300]})")
        sent = api.post(
            "/assistant/api/agents/clerk/sessions/s1/turns", json={"text": "", "attachments": [up.json()["id"]]}
        )
        check(sent.status_code in (200, 202), f"a turn carrying it starts ({sent.status_code} {sent.text[:300]})")
        back = api.get(f"/assistant/api/agents/clerk/sessions/s1/attachments/{up.json()['id']}")
        check(back.status_code == 200 and back.content == png(), f"its uploader reads it back ({back.status_code})")

        parked = turn(api, "refund order 1 5")
        check(parked["status"] == "suspended", f"a refund parks for staff ({parked['status']})")
        staff = httpx.Client(base_url=host.base, follow_redirects=True)
        login = staff.get("/staff/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        staff.post(
            "/staff/login/",
            data={"csrfmiddlewaretoken": token, "username": "bob@shop.test", "password": "bob-pw", "next": "/staff/"},
        )
        card = staff.get(f"/staff/sessions_app/approvalrequest/{parked['turn_id']}/change/")
        check(
            card.status_code == 200 and 'id="june-approve"' in card.text,
            f"the host's admin shows the approval with Approve ({card.status_code})",
        )
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', card.text).group(1)
        input_id = re.search(r'name="input_id" value="([^"]+)"', card.text).group(1)
        answered = staff.post(
            f"/staff/sessions_app/approvalrequest/{parked['turn_id']}/change/",
            data={"csrfmiddlewaretoken": token, "input_id": input_id, "decision": "approve"},
            headers={"Referer": host.base + "/staff/"},
        )
        check(answered.status_code == 200, f"staff answer it in the host's admin ({answered.status_code})")
        deadline = time.time() + 30
        status = ""
        while time.time() < deadline:
            status = api.get(f"/assistant/api/agents/clerk/sessions/s1/turns/{parked['turn_id']}").json()["status"]
            if status == "completed":
                break
            time.sleep(0.2)
        check(status == "completed", f"the approved turn resumes and completes ({status})")

        board = staff.get("/staff/sessions_app/approvalrequest/dashboard/")
        users = board.text[board.text.index('id="june-quotas"') :] if 'id="june-quotas"' in board.text else ""
        check(
            board.status_code == 200
            and "alice@shop.test" in users
            and (creds["alice"].isdigit() or creds["alice"] not in board.text),
            f"the dashboard names its users by their login, not their key ({board.status_code})",
        )
        print("host project smoke: all checks passed", flush=True)
    finally:
        host.stop()


if __name__ == "__main__":
    main()
