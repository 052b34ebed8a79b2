"""docs/api.md's token command works as written on the embedded default (issue 17, item 13).

Pins: ``python manage.py june token alice`` failed with "SECRET_KEY must be set" unless
``JUNE_EMBEDDED=1`` was set, which only the README mentioned. Without ``DATABASE_URL`` (the
embedded SQLite under var/) a key is made once in ``var/secret_key`` (mode 0600) and reused by
every ``manage.py`` command; with ``DATABASE_URL`` a missing ``SECRET_KEY`` still refuses."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _manage(var: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SECRET_KEY", "DATABASE_URL", "JUNE_EMBEDDED", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE")
        and not k.startswith("PYTEST")
    }
    env.update({"JUNE_VAR_DIR": str(var), "DJANGO_SETTINGS_MODULE": "june_project.settings", **extra})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.mark.slow
def test_the_token_command_works_on_the_embedded_default_without_settings(tmp_path):
    assert _manage(tmp_path, "migrate", "-v0").returncode == 0
    made = _manage(
        tmp_path, "shell", "-c", "from django.contrib.auth import get_user_model as g; g().objects.create_user('alice')"
    )
    assert made.returncode == 0, made.stderr
    out = _manage(tmp_path, "june", "token", "alice")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("june_")
    key_file = tmp_path / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text()
    assert len(key) > 40
    # the same key next time (django-q2 signs tasks with it: every command must agree)
    again = _manage(tmp_path, "shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)")
    assert again.stdout.strip().splitlines()[-1] == key


def test_a_deployment_without_secret_key_still_refuses(tmp_path):
    out = _manage(tmp_path, "check", DATABASE_URL="postgres://nobody@127.0.0.1:1/none")
    assert out.returncode != 0 and "SECRET_KEY must be set" in out.stderr
    assert not (tmp_path / "secret_key").exists()
