"""The public package's helpers as a host project's settings use them (docs/install.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import june
from june import settings as june_settings

ROOT = Path(__file__).resolve().parents[2]


def test_q_cluster_needs_no_databases_and_picks_the_broker_at_run_time():
    """The page's settings block, pasted where startproject has INSTALLED_APPS, failed with a
    NameError on DATABASES (``q_cluster(database_engine=DATABASES[...])``)."""
    cluster = june_settings.q_cluster({})
    # June's broker looks at the connection when it runs: LISTEN/NOTIFY on PostgreSQL, else django-q2's
    assert cluster["broker_class"] == "sessions_app.workers.broker.NotifyingORM"
    assert "broker_class" not in june_settings.q_cluster({}, database_engine="django.db.backends.sqlite3")


def test_sqlite_databases_get_junes_options_where_theirs_leave_them_out():
    """Startproject's bare SQLite options refused 17 of 25 concurrent turn starts."""
    databases = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"},
        "tuned": {"ENGINE": "django.db.backends.sqlite3", "NAME": "t", "OPTIONS": {"timeout": 5}},
        "pg": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"},
    }
    june_settings.tune_sqlite(databases)
    assert databases["default"]["OPTIONS"] == june_settings.SQLITE_OPTIONS
    assert databases["tuned"]["OPTIONS"]["timeout"] == 5  # the host's own value stays
    assert databases["tuned"]["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "OPTIONS" not in databases["pg"]


def test_installed_apps_hold_the_api_docs_static_files():
    """/api/docs/ was blank (a 500 with manifest storage): the page's INSTALLED_APPS left out
    drf_spectacular_sidecar."""
    from django.conf import settings

    assert "drf_spectacular_sidecar" in june_settings.INSTALLED_APPS
    assert set(june_settings.INSTALLED_APPS) <= set(settings.INSTALLED_APPS)


def test_the_version_is_the_wheels_and_the_changelogs():
    """The wheel said 0.2.0 while the CHANGELOG called its contents 0.3.0."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" in project["dynamic"] and "version" not in project
    newest = re.search(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)[1]
    assert june.__version__ == newest
