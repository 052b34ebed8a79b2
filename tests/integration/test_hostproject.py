"""June inside a host project (tests/hostproject: a custom user model, its own base template, its
own app with an agent and a model, June under ``/assistant/``), driven end to end by its smoke
script: real daphne, a real worker, the host's URLs, websocket and admin. On the suite's backend:
a database of its own on PostgreSQL, a new SQLite file otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import is_postgres

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "tests" / "hostproject" / "smoke.py"


@pytest.fixture
def host_database_url():
    if not is_postgres():
        yield None
        return
    import psycopg
    from django.db import connection

    name = f"june_host_{uuid.uuid4().hex[:10]}"
    params = connection.settings_dict
    dsn = f"host={params['HOST'] or '127.0.0.1'} port={params['PORT'] or 5432} user={params['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{params['USER']}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
@pytest.mark.parametrize("settings_module", ["settings", "settings_uuid", "settings_str"])
def test_june_runs_inside_a_host_project(host_database_url, settings_module):
    """Also with a user model keyed by a UUID or a string, where every turn started over the API
    was a 500 on PostgreSQL (``cannot send UUID as a checkpoint parameter``), a websocket start an
    error frame, every upload a 500 (the uploader's key in a bigint column) and the dashboard
    named users by their raw key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST", "JUNE_", "HOST_"))}
    env.pop("DATABASE_URL", None)
    env["HOST_SETTINGS"] = f"hostproject.{settings_module}"
    if host_database_url:
        env["DATABASE_URL"] = host_database_url
    env["PYTHONPATH"] = str(ROOT)  # June from this checkout (the wheel's own run: .ci/run)
    out = subprocess.run(
        [sys.executable, str(SMOKE)], env=env, cwd=SMOKE.parent.parent, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert "host project smoke: all checks passed" in out.stdout
