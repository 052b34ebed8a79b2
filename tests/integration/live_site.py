"""A live June site for tests that drive it from outside (node clients, a browser page): daphne
and a worker (``june_worker``) as subprocesses on this test's database, and the npm clients
that ``dev.py`` installs in tests/js."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
from django.conf import settings

from tests.processes import database_url, free_port

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "js"
DEADLINE = 90.0  # a loaded 2-core machine: generous, and only ever polled


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@contextlib.contextmanager
def live_site(logs: Path, **extra_env: str) -> Iterator[str]:
    """daphne + one worker on the test database; yields the base URL."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
    env.update(
        DATABASE_URL=database_url(),
        JUNE_Q_SYNC="0",
        JUNE_Q_WORKERS="1",
        JUNE_Q_POLL="0.05",
        JUNE_DEMO_DELAY="0",
        SECRET_KEY=settings.SECRET_KEY,
        JUNE_Q_NAME=settings.Q_CLUSTER["name"],
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
        JUNE_RATE_LIMITS="0",
    )
    env.update(extra_env)
    port = free_port()
    procs = []
    commands = {
        "daphne": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        "qcluster": [sys.executable, "manage.py", "june_worker"],
    }
    for name, cmd in commands.items():
        log = open(logs / f"{name}.log", "wb")
        procs.append(
            subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            try:
                if httpx.get(url + "/api/openapi.json", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (logs / "daphne.log").read_text()
            assert procs[0].poll() is None, (logs / "daphne.log").read_text()
            time.sleep(0.2)  # polling for the server to listen
        yield url
    finally:
        for proc in procs:
            _stop(proc)


def node(script: str, args: dict[str, Any], *, timeout: float = DEADLINE) -> Any:
    """Run ``tests/js/<script>`` with ``args`` (JSON); its one line of JSON output, parsed."""
    assert (JS / "node_modules" / "ai").is_dir(), "the npm clients are missing: run `python3 dev.py test` (npm ci)"
    done = subprocess.run(
        ["node", str(JS / script), json.dumps(args)], cwd=JS, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"node {script} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])
