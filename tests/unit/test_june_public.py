"""The public package's helpers as a host project's settings use them (docs/install.md)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import june
from agents_app.mcp import sources_for
from agents_app.runtime.errors import AgentConfigError
from june import settings as june_settings
from sessions_app.telemetry import setup as telemetry_setup

ROOT = Path(__file__).resolve().parents[2]


def test_q_cluster_needs_no_databases_and_picks_the_broker_at_run_time():
    """The page's settings block, pasted where startproject has INSTALLED_APPS, failed with a
    NameError on DATABASES (``q_cluster(database_engine=DATABASES[...])``)."""
    cluster = june_settings.q_cluster({})
    # June's broker looks at the connection when it runs: LISTEN/NOTIFY on PostgreSQL, a look
    # gated by data_version on SQLite, else django-q2's
    assert cluster["broker_class"] == "sessions_app.workers.broker.NotifyingORM"
    lite = june_settings.q_cluster({}, database_engine="django.db.backends.sqlite3")
    assert lite["broker_class"] == "sessions_app.workers.broker.NotifyingORM"
    assert "broker_class" not in june_settings.q_cluster({}, database_engine="django.db.backends.mysql")


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


@pytest.fixture
def missing(monkeypatch):
    """Make the named top-level packages look uninstalled to ``importlib.util.find_spec``."""
    real = importlib.util.find_spec
    gone: set[str] = set()

    def find_spec(name, *args, **kwargs):
        return None if name.split(".")[0] in gone or name in gone else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return gone


def test_redis_without_its_extra_names_the_extra(missing):
    missing.add("channels_redis")
    with pytest.raises(ImproperlyConfigured, match=re.escape("pip install 'june-django[redis]'")):
        june_settings.channel_layers({"REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert june_settings.channel_layers({}, var_dir="/tmp/x")["default"]["BACKEND"].endswith("UnixSocketChannelLayer")


def test_mcp_servers_without_the_extra_name_it(missing):
    missing.add("mcp")
    with pytest.raises(AgentConfigError, match=re.escape("pip install 'june-django[mcp]'")):
        sources_for("ops", [{"name": "inventory", "command": ["true"]}])
    assert sources_for("ops", None) == []


def test_otel_export_without_the_extra_names_it(missing, monkeypatch):
    missing.add("opentelemetry.sdk")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    with pytest.raises(ImproperlyConfigured, match=re.escape("pip install 'june-django[otel]'")):
        telemetry_setup._install()


def test_every_runtime_dependency_and_extra_is_on_the_install_page():
    """docs/install.md "What it installs" justifies each runtime dependency and names each extra:
    a dependency added without a reason there fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    page = (ROOT / "docs" / "install.md").read_text()
    section = page[page.index("## What it installs") :]
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)[0]
        assert f"`{name}" in section, f'{name} is not in docs/install.md\'s "What it installs"'
    for extra in project["optional-dependencies"]:
        if extra not in ("test", "site"):  # this repository's own
            assert f"`[{extra}]`" in section, f"the [{extra}] extra is not in docs/install.md"
