"""A host project built from docs/install.md in a temporary folder, as a developer builds it:
``django-admin startproject``, the page's files, its commands, its two processes.

Only what must differ between runs differs from the page: the port (daphne's ``-p``, the URLs'
``:8000``), the PostgreSQL database's name and server, and ``createsuperuser``'s answers (Django's
``DJANGO_SUPERUSER_*`` variables with ``--noinput``). A variant of the matrix rewrites the page's
text with ``rewrite`` (each old text must be in the page: a docs change that drops it fails) and
adds its own files with ``before_commands``, run after the page's files, before its commands."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import httpx

from tests.install import page
from tests.processes import free_port

BIN = Path(sys.executable).parent  # the virtual environment's python, django-admin, daphne
OPERATOR = {"username": "olga", "email": "olga@example.com", "password": "olga-pw-4821"}


class Host:
    def __init__(
        self,
        *,
        tags: set[str] = frozenset(),
        rewrite: dict[str, str] | None = None,
        before_commands: Callable[[Host], None] | None = None,
        database_url: str = "",
    ) -> None:
        self.tags = set(tags)
        self.rewrite = dict(rewrite or {})
        self.before_commands = before_commands
        self.folder = Path(tempfile.mkdtemp(prefix="june-install-"))
        self.cwd = self.folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.timings: dict[str, float] = {}
        self.pasted = 0
        self.database_url = database_url
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "JUNE_", "PYTEST", "DATABASE"))}
        for name in ("PYTHONPATH", "REDIS_URL", "ANTHROPIC_API_KEY", "VIRTUAL_ENV"):
            env.pop(name, None)
        env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
        env.update({f"DJANGO_SUPERUSER_{k.upper()}": v for k, v in OPERATOR.items()})
        if "postgres" in self.tags:
            env["REDIS_URL"] = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
            env["JUNE_CHANNEL_PREFIX"] = f"install-{uuid.uuid4().hex[:8]}"  # a Redis shared by test runs
        self.env = env

    # -- the page ---------------------------------------------------------------------------
    def text(self, block: page.Block) -> str:
        text = block.text
        for old, new in self.rewrite.items():
            text = text.replace(old, new)
        if block.action in ("run", "serve"):
            text = text.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
            text = text.replace("daphne mysite", f"daphne -b 127.0.0.1 -p {self.port} mysite")
            text = text.replace("createsuperuser ", "createsuperuser --noinput ")
        if block.path == "mysite/settings.py" and "postgres" in self.tags and self.database_url:
            url = urlparse(self.database_url)
            text = text.replace('"NAME": "mysite"', f'"NAME": "{url.path.lstrip("/")}"')
            text = text.replace('"USER": "postgres"', f'"USER": "{url.username or "postgres"}"')
            text = text.replace(
                '"HOST": "127.0.0.1"', f'"HOST": "{url.hostname or "127.0.0.1"}", "PORT": {url.port or 5432}'
            )
        return text

    def build(self) -> None:
        """Every block of the page for this build, in order, up to the processes (not started)."""
        blocks = page.for_build(page.blocks(), self.tags)
        joined = "\n".join(b.text for b in blocks)
        missing = [old for old in self.rewrite if old not in joined]
        assert not missing, f"the variant rewrites text docs/install.md no longer has: {missing}"
        self.serve_block = None
        hooked = False
        for block in blocks:
            if block.action == "serve":
                self.serve_block = block
                continue
            if block.action == "run" and block.tag == "api":
                self.api_block = block
                continue
            self.pasted += len(block.lines)
            if block.action == "run":
                if not hooked and self.before_commands and "migrate" in block.text:
                    self.before_commands(self)
                    hooked = True
                self.run(self.text(block), what=_label(block))
            else:
                self.write(block)
        assert self.serve_block is not None, "docs/install.md starts no processes"
        self.pasted += len(self.serve_block.lines)

    def write(self, block: page.Block) -> None:
        path = self.cwd / block.path
        text = self.text(block)
        if block.action == "append":
            assert path.exists(), f"docs/install.md appends to {block.path}, which the build has not made"
            old = path.read_text()
            path.write_text(old.rstrip("\n") + "\n\n" + text + "\n")
        else:
            assert block.action == "create" or path.exists(), f"docs/install.md replaces a missing {block.path}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")

    def run(self, script: str, *, what: str = "", timed: bool = True, status: int = 0) -> str:
        """A shell block in the project's folder; ``cd`` in it moves the folder for the next."""
        marker = self.folder / ".cwd"
        started = time.monotonic()
        out = subprocess.run(
            ["bash", "-e", "-c", f"{script}\npwd > {marker}"],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if timed:
            self.timings[what or script.splitlines()[0]] = time.monotonic() - started
        assert out.returncode == status, (
            f"`{script}` exited {out.returncode}, not {status}:\n{out.stdout[-3000:]}\n{out.stderr[-5000:]}"
        )
        self.cwd = Path(marker.read_text().strip())
        return out.stdout

    def manage(self, *args: str) -> str:
        return self.run(" ".join(["python", "manage.py", *map(_quote, args)]), timed=False)

    # -- the processes ----------------------------------------------------------------------
    def start(self, ready_path: str = "/assistant/login/") -> None:
        started = time.monotonic()
        for i, line in enumerate(page.commands(self.serve_block)):
            command = self.text(page.Block("serve", "", "", line)).split("#")[0].strip()
            log = open(self.folder / f"process-{i}.log", "wb")
            self.procs.append(
                subprocess.Popen(
                    ["bash", "-c", f"exec {command}"],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert all(p.poll() is None for p in self.procs), "a process of the page exited:\n" + self.logs()
            try:
                if httpx.get(self.base + ready_path, timeout=2).status_code == 200:
                    self.timings["the processes start"] = time.monotonic() - started
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("daphne did not answer within 90 s:\n" + self.logs())

    def logs(self) -> str:
        return "\n".join(
            f"--- {log.name} (last 4,000 characters)\n{log.read_text(errors='replace')[-4000:]}"
            for log in sorted(self.folder.glob("process-*.log"))
        )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)


def _label(block: page.Block) -> str:
    """A shell block's commands in a few words: ``python manage.py migrate  # …`` -> ``migrate``."""
    words = [c.split("#")[0].split() for c in page.commands(block)]
    return ", ".join(" ".join(w[2:4] if w[:2] == ["python", "manage.py"] else w[:2]) for w in words if w)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"
