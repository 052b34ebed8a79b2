"""``/healthz``, ``/readyz`` and ``manage.py june health`` (issue 39, item 3; docs/operations.md
"Health"), on the backends of the run (SQLite, or PostgreSQL + Redis).

"The database is down" is simulated honestly and without touching the server the other tests
use: on the readiness checks' own thread (``health.probe_thread``), whose connection is its own, that
connection is closed and its settings replaced by the test database's except where it is: on
PostgreSQL a port on 127.0.0.1 where nothing listens (psycopg really connects, and is refused),
on SQLite a file in a directory that does not exist (sqlite3 really opens it, and cannot). Every
other thread keeps the real database. Given its settings back, the same checks pass again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.utils import timezone

from sessions_app import health
from sessions_app import models as m
from sessions_app.admin.console import dashboard_data
from tests.fault.qcluster import free_port

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_METHODS = ("POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "BREW")


class Outage:
    """The checks' thread's database connection pointed at nothing (module docstring)."""

    def __init__(self) -> None:
        self.settings = dict(connections.settings["default"])
        self.real: dict | None = None
        if self.settings["ENGINE"].endswith("postgresql"):
            self.settings["HOST"], self.settings["PORT"] = "127.0.0.1", str(free_port())  # nothing listens
        else:
            self.settings["NAME"] = "/nonexistent/june-health/db.sqlite3"

    def _on_health_thread(self, fn) -> None:
        health.probe_thread.submit(fn).result(timeout=10)

    def down(self) -> None:
        def swap() -> None:
            conn = connections["default"]
            conn.close()
            if self.real is None:
                self.real = conn.settings_dict
            conn.settings_dict = self.settings  # this thread's wrapper only: the others keep theirs

        self._on_health_thread(swap)

    def up(self) -> None:
        def back() -> None:
            conn = connections["default"]
            conn.close()
            if self.real is not None:
                conn.settings_dict, self.real = self.real, None

        self._on_health_thread(back)


@pytest.fixture
def outage():
    outage = Outage()
    outage.down()
    yield outage
    outage.up()


def _json(response) -> dict:
    assert response["Content-Type"] == "application/json", (response.status_code, response.content[:200])
    return json.loads(response.content)


def test_healthz_and_readyz_answer_200_json_with_every_check_ok():
    """Pins the missing endpoints: a load balancer had nothing to probe (a 404 HTML page)."""
    client = Client()
    for path in ("/healthz", "/healthz/"):
        response = client.get(path)
        assert response.status_code == 200 and _json(response) == {"status": "ok"}
    for path in ("/readyz", "/readyz/"):
        response = client.get(path)
        assert response.status_code == 200, response.content
        assert _json(response) == {
            "status": "ok",
            "workers": 0,
            "checks": {"database": "ok", "queue": "ok", "migrations": "ok", "channel_layer": "ok"},
        }
        assert "no-cache" in response["Cache-Control"]
    head = client.head("/readyz")
    assert head.status_code == 200 and head.content == b""


def test_readyz_turns_503_with_the_database_down_and_200_after(outage):
    """The issue's test: with the database out of reach /readyz answers a JSON 503 with
    Retry-After that names the failed checks and nothing else (no host, no port, no error text),
    never a 500 or an HTML page; pointed back at the database, 200 again."""
    client = Client()
    response = client.get("/readyz")
    assert response.status_code == 503
    answer = _json(response)
    assert answer["status"] == "failed" and response["Retry-After"]
    assert answer["checks"]["database"] == "failed" and answer["checks"]["queue"] == "failed"
    assert answer["checks"]["channel_layer"] == "ok" and "workers" not in answer
    text = response.content.decode()
    for secret in (
        outage.settings["NAME"],
        str(outage.settings.get("PORT") or "nothing"),
        "127.0.0.1",
        "refused",
        "unable to open",
    ):
        assert secret not in text
    assert client.get("/healthz").status_code == 200  # the process is up all the same

    outage.up()
    response = client.get("/readyz")
    assert response.status_code == 200 and _json(response)["status"] == "ok"


def test_readyz_answers_a_json_503_when_the_checks_themselves_fail(monkeypatch):
    """Never a 500: an exception out of the checks (a bug, a broken layer) is a failed check."""

    async def broken() -> dict:
        raise RuntimeError("secret detail")

    monkeypatch.setattr(health, "readiness", broken)
    response = Client().get("/readyz")
    assert response.status_code == 503 and "secret" not in response.content.decode()
    assert set(_json(response)["checks"].values()) == {"failed"}


@pytest.mark.parametrize("method", HOSTILE_METHODS)
def test_other_methods_get_a_json_405_never_html_or_a_csrf_page(method):
    client = Client(enforce_csrf_checks=True)
    for path in ("/healthz", "/readyz", "/readyz/"):
        response = client.generic(method, path, data=b"<x/>", content_type="text/html")
        assert response.status_code == 405, (method, path, response.status_code)
        assert _json(response)["error"]["code"] == "method_not_allowed"
        assert response["Allow"] == "GET, HEAD"


def test_hostile_queries_and_hosts_get_json():
    client = Client()
    response = client.get("/readyz?<script>=1&checks=../../etc/passwd")
    assert response.status_code == 200 and _json(response)["status"] == "ok"
    refused = client.get("/readyz", HTTP_HOST="evil.example")  # a Host not in ALLOWED_HOSTS
    assert refused.status_code == 400 and _json(refused)["error"]["code"] == "bad_request"


def test_june_health_exits_0_when_ready_and_1_when_the_database_is_down(capsys, outage):
    outage.up()
    call_command("june", "health")
    assert "ready: yes" in capsys.readouterr().out
    outage.down()
    with pytest.raises(SystemExit) as exited:
        call_command("june", "health", "--json")
    assert exited.value.code == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "failed" and report["checks"]["database"] == "failed"


def test_the_dashboard_and_june_health_list_workers_and_mark_the_gone(settings, capsys):
    """A worker not seen for 3 beats is marked gone; /readyz counts only the live ones and a
    site with no live worker is still ready (a web-only deployment)."""
    settings.JUNE_WORKER_BEAT_SECONDS = 5
    now = timezone.now()
    m.WorkerBeat.objects.create(
        id="host-a:11", started_at=now - dt.timedelta(hours=1), seen_at=now, running=3, slots=200
    )
    m.WorkerBeat.objects.create(
        id="host-b:22",
        started_at=now - dt.timedelta(hours=1),
        seen_at=now - dt.timedelta(seconds=16),
        running=1,
        slots=200,
    )
    data = dashboard_data(now=now)
    assert [(w["id"], w["stale"], w["running"], w["slots"]) for w in data["workers"]] == [
        ("host-a:11", False, 3, 200),
        ("host-b:22", True, 1, 200),
    ]
    assert data["workers_alive"] == 1
    assert _json(Client().get("/readyz"))["workers"] == 1
    call_command("june", "health")
    out = capsys.readouterr().out
    assert "workers: 1 alive, 1 gone" in out and "host-b:22" in out and "GONE" in out
    call_command("june", "health", "--min-workers", "1")
    with pytest.raises(SystemExit) as exited:
        call_command("june", "health", "--min-workers", "2")
    assert exited.value.code == 2

    m.WorkerBeat.objects.filter(pk="host-a:11").update(seen_at=now - dt.timedelta(minutes=5))
    response = Client().get("/readyz")
    assert response.status_code == 200 and _json(response)["workers"] == 0


def test_the_dashboard_page_shows_the_workers(admin_client):
    now = timezone.now()
    m.WorkerBeat.objects.create(
        id="host-c:33", started_at=now, seen_at=now - dt.timedelta(minutes=2), running=0, slots=8
    )
    page = admin_client.get("/admin/june/dashboard/?fragment=1").content.decode()
    assert 'id="june-workers"' in page and "host-c:33" in page and "gone" in page


def test_probes_leave_nothing_behind_in_the_channel_layer():
    """Pins a leak: each probe's throwaway channel left an empty queue in the unix-socket layer
    (a receive that found its message at once kept the channel's queue: 86,400 a day at a probe
    a second)."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    client = Client()
    assert client.get("/readyz").status_code == 200  # (the layer binds its socket: its state starts anew)

    def held() -> int:
        return len(layer._queues if hasattr(layer, "_queues") else layer.receive_buffer)  # ours, channels_redis

    before = held()
    for _ in range(20):
        assert client.get("/readyz").status_code == 200
    assert held() <= before


def test_concurrent_probes_share_the_checks_instead_of_failing():
    """Pins readiness flipped by anonymous clients: a /readyz that arrived while another one's
    database checks ran answered 503 (50 concurrent probes on a healthy database: 32 × 503), so
    three curl loops made a load balancer's probe fail up to 3 times in a row. Concurrent probes
    share the run in flight: every one of them is ok, with the same report. (The endpoint under
    concurrent anonymous probes over HTTP: tests/hostile/test_probes.py.)"""

    async def crowd() -> list:
        return await asyncio.gather(*(health.readiness() for _ in range(30)))

    reports = async_to_sync(crowd)()
    assert [r["status"] for r in reports] == ["ok"] * 30, reports
    assert all(r == reports[0] for r in reports)


def test_a_stuck_check_fails_the_next_probes_at_once(settings, monkeypatch):
    """Sharing a run in flight never waits behind a stuck one: once the run is older than the
    timeout, the next probe fails at once (503) instead of queueing behind it."""
    import threading
    import time

    settings.JUNE_HEALTH_TIMEOUT = 0.3
    release = threading.Event()
    monkeypatch.setattr(health, "_database", lambda: release.wait(10))
    try:
        assert Client().get("/readyz").status_code == 503  # the first waits its timeout, then fails
        started = time.monotonic()
        assert Client().get("/readyz").status_code == 503
        assert time.monotonic() - started < 0.25  # not another timeout's wait
    finally:
        release.set()
        health.probe_thread.submit(lambda: None).result(timeout=10)
