"""The browser test harness: a real daphne and a real ``qcluster`` on the test database, and
Debian's Chromium driven by Playwright.

Fixtures (use them from any test under tests/browser/):

- ``june_server`` (package: stopped after the last browser test, so its cluster never runs
  other tests' turns): starts ``daphne`` on a free port and ``manage.py qcluster``, both
  with this test run's environment (``JUNE_VAR_DIR``, ``REDIS_URL``, …) and ``DATABASE_URL``
  pointing at pytest-django's test database. Its ``.url`` is the base URL; its ``.logs`` the
  directory with both processes' output (read it when a test fails). The demo model streams with
  ``JUNE_DEMO_DELAY`` (default 0.03 s per piece; override with ``JUNE_BROWSER_DEMO_DELAY``).
- ``browser`` (package): a headless Chromium (``/usr/bin/chromium``, never downloaded). Playwright's
  sync API runs an event loop in the main thread while it is open: package scope closes it
  before the async tests of other packages run.
- ``make_user(username, password=None, staff=False, groups=())``: a committed user.
- ``new_page(user=None)``: a page in a fresh browser context; with a user, already logged in
  (a real Django session cookie, no form round trip). Contexts close at the end of the test.
- ``login_with_form(page, username, password)``: log in through the login page.
- ``chat_url(agent, key)`` and ``open_chat(page, agent, key)``: the chat page, waited until its
  websocket is live.

Browser tests need committed data the servers can see: they run with
``django_db(transaction=True)`` (the ``pytestmark`` below applies it to this package via
``pytest_collection_modifyitems``). Never assert wall-clock timings; wait on page conditions with
generous deadlines (``DEADLINE_MS``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.fault.qcluster import wait_for
from tests.processes import database_url, free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("JUNE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
DEADLINE_MS = 60_000


def pytest_collection_modifyitems(config, items):
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.django_db(transaction=True))


@dataclass
class JuneServer:
    url: str
    logs: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def tail(self, lines: int = 40) -> str:
        out = []
        for f in sorted(self.logs.glob("*.log")):
            out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)


def _wait_http(url: str, procs: list[subprocess.Popen], deadline: float) -> None:
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a server process exited during start-up")
        try:
            urllib.request.urlopen(url + "/accounts/login/", timeout=5).read()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer on {url} in time")


@pytest.fixture(scope="package")
def june_server(django_db_setup, django_db_blocker) -> Iterator[JuneServer]:
    with django_db_blocker.unblock():
        url = database_url()
    from django.conf import settings

    port = free_port()
    logs = Path(settings.VAR_DIR) / "browser-logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "june_project.settings",
        "JUNE_DEMO_DELAY": os.environ.get("JUNE_BROWSER_DEMO_DELAY", "0.03"),
        "SECRET_KEY": settings.SECRET_KEY,  # the test client's session cookies must verify
        "DEBUG": "0",
        "PYTHONUNBUFFERED": "1",
    }
    server = JuneServer(url=f"http://127.0.0.1:{port}", logs=logs)
    commands = {
        "daphne": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        "qcluster": [sys.executable, "manage.py", "june_worker"],
    }
    # production-like static files: whitenoise serves the collected, compressed copies
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    for name, cmd in commands.items():
        out = open(logs / f"{name}.log", "w")
        server.procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
    try:
        _wait_http(server.url, server.procs, time.time() + 90)
        yield server
    finally:
        for p in server.procs:
            if p.poll() is None:
                p.terminate()
        for p in server.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def make_user(transactional_db) -> Iterator[Callable[..., Any]]:
    """Users for a test. Its teardown runs before the database is emptied (``transactional_db``'s),
    and first stops the turns the test left going (``_stop_turns``)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    def make(username: str, password: str | None = None, *, staff: bool = False, groups: tuple[str, ...] = ()):
        user = get_user_model().objects.create_user(username, password=password or f"pw-{username}-123", is_staff=staff)
        for name in groups:
            user.groups.add(Group.objects.get_or_create(name=name)[0])
        return user

    yield make
    _stop_turns()


def _stop_turns(timeout: float = 30.0) -> None:
    """Cancel the turns a test left queued or running, and wait until the worker has ended them:
    a worker still writing a turn's rows broke the emptying of the database after the test (a
    foreign key violation at its COMMIT on PostgreSQL, then the next test's user already there).
    A parked turn writes nothing: it stays as it is."""
    from django.db import connections

    from agents_app.runtime.records import TurnStatus
    from sessions_app import models as m
    from sessions_app import services
    from sessions_app.site_errors import JuneError

    going = (TurnStatus.QUEUED, TurnStatus.RUNNING)

    def cancel(turn_ids: list[str]) -> None:
        try:
            for turn_id in turn_ids:
                with contextlib.suppress(JuneError):  # ended meanwhile
                    services.turn_cancel(turn_id=turn_id)
        finally:
            connections.close_all()

    # on a thread of its own: Playwright's sync API keeps an event loop on this one, where a
    # service call (async_to_sync) cannot run
    turn_ids = list(m.Turn.objects.filter(status__in=going).values_list("id", flat=True))
    if turn_ids:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(cancel, turn_ids).result()
    wait_for(
        lambda: not m.Turn.objects.filter(status__in=going).exists(),
        timeout=timeout,
        interval=0.1,
        what="the worker to end the turns the test left going",
    )


@pytest.fixture
def new_page(june_server: JuneServer, browser: Any) -> Iterator[Callable[..., Any]]:
    from django.test import Client

    contexts = []

    def make(user: Any = None) -> Any:
        context = browser.new_context(base_url=june_server.url)
        context.set_default_timeout(DEADLINE_MS)
        contexts.append(context)
        if user is not None:
            client = Client()
            client.force_login(user)
            context.add_cookies(
                [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": june_server.url}]
            )
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(autouse=True)
def _server_logs_on_failure(request):
    """When a browser test fails, print the tail of daphne's and the cluster's output."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed and "june_server" in request.fixturenames:
        print(request.getfixturevalue("june_server").tail())


def login_with_form(page: Any, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url("**/")


def chat_url(agent: str, key: str) -> str:
    return f"/agents/{agent}/sessions/{key}/"


def open_chat(page: Any, agent: str, key: str) -> Any:
    page.goto(chat_url(agent, key))
    wait_live(page)
    return page


def wait_live(page: Any) -> None:
    page.wait_for_selector("#conn[data-state=live]", timeout=DEADLINE_MS)


def send_message(page: Any, text: str) -> None:
    page.fill("#text", text)
    page.click("#send")
