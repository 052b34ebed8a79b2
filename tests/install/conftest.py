"""Fixtures of the docs-driven host projects: the backend of the suite's run (PostgreSQL + Redis
when DATABASE_URL names a PostgreSQL server: a database of the host's own on it, dropped after),
and a headless Chromium (Debian's, as tests/browser)."""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterator
from urllib.parse import urlparse

import psycopg
import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, DEADLINE_MS

#: what the docs test measured (the developer's time to a first answer, the lines pasted), printed
#: in the run's summary, where CI's log shows it
FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("docs/install.md: a developer's path")
        for line in FIGURES:
            terminalreporter.write_line(line)


def on_postgres() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))


@pytest.fixture
def host_database() -> Iterator[str]:
    """A fresh PostgreSQL database's URL for a host project ("" on SQLite: the page's own file)."""
    if not on_postgres():
        yield ""
        return
    server = urlparse(os.environ["DATABASE_URL"])
    name = f"june_install_{uuid.uuid4().hex[:10]}"
    admin = f"host={server.hostname or '127.0.0.1'} port={server.port or 5432} user={server.username or 'postgres'} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def new_context(chromium: Any) -> Iterator[Any]:
    contexts = []

    def make(base_url: str) -> Any:
        context = chromium.new_context(base_url=base_url)
        context.set_default_timeout(DEADLINE_MS)
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()
