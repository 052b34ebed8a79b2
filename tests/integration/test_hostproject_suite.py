"""The host project's own test suite (tests/hostproject: pytest-django, June's ``june`` fixture
from its pytest11 entry point, the shop's clerk agent and its ``Purchase`` table) run as its team
runs it, ``pytest`` in its folder, on this suite's backend. (docs/testing.md's example runs in
docs/install.md's project: tests/install/test_kit_docs.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import is_postgres

ROOT = Path(__file__).resolve().parents[2]
HOST = ROOT / "tests" / "hostproject"


def _database_url() -> str | None:
    if not is_postgres():
        return None  # SQLite: pytest-django's in-memory test database
    from django.db import connection

    p = connection.settings_dict
    # a database name of its own: pytest-django creates test_<name> and drops it after
    name = f"{p['NAME']}_hostsuite_{os.getpid()}"
    return f"postgres://{p['USER']}@{p['HOST'] or '127.0.0.1'}:{p['PORT'] or 5432}/{name}"


@pytest.mark.slow  # a pytest process of its own: 18-30 s on a loaded machine
def test_the_host_projects_suite_passes_with_the_june_fixture(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST", "JUNE_", "DATABASE_URL"))}
    url = _database_url()
    if url:
        env["DATABASE_URL"] = url
    env["HOST_VAR_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"],
        env=env,
        cwd=HOST,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert re.search(r"\b8 passed\b", out.stdout), out.stdout[-2000:]

    # the evals' cases keep a member by the text of their key: a UUID or a string key too
    # (a bigint column: making cases of such a member's session was a 500)
    for settings_module in ("settings_uuid", "settings_str"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                f"--ds=hostproject.{settings_module}",
                "shop/tests/test_eval_cases.py",
            ],
            env=env,
            cwd=HOST,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0 and re.search(r"\b1 passed\b", out.stdout), out.stdout[-4000:] + out.stderr[-2000:]
