"""A burst of requests against one real daphne: every POST is accepted (202), none refused, and
on PostgreSQL the web process never holds more connections than its pool allows — a request
waits for a connection instead of opening one of its own (PostgreSQL's max_connections ran out
at 200 simultaneous POSTs: 106 refused with 503, issue 36)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from django.conf import settings

from sessions_app import models as m
from tests.conftest import is_postgres
from tests.fault.qcluster import database_url, free_port

from .test_api_sse import DEADLINE, ROOT, _stop

pytestmark = pytest.mark.django_db(transaction=True)

POOL = 4
BURST = 200


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker, tmp_path_factory):
    """One daphne (no worker: the turns stay queued) whose pool holds at most ``POOL``."""
    logs = tmp_path_factory.mktemp("burst")
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
    env.update(
        DATABASE_URL=database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        JUNE_Q_NAME=settings.Q_CLUSTER["name"],
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
        JUNE_DB_POOL_MAX=str(POOL),
        JUNE_DB_POOL_MIN="1",
        JUNE_DB_POOL_TIMEOUT="60",
        JUNE_RATE_TURNS_PER_MINUTE="0",
    )  # one user's 200 POSTs: the pool is the subject, not the rate
    port = free_port()
    log = open(logs / "daphne.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
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
            assert time.monotonic() < deadline and proc.poll() is None, (logs / "daphne.log").read_text()
            time.sleep(0.2)  # polling for the server to listen
        yield url, proc.pid, logs / "daphne.log"
    finally:
        _stop(proc)


def _sample_connections(pid: int, stop: threading.Event, seen: list[int]) -> None:
    """The web process's connections to the server, as the server counts them: by the client
    port of each backend, matched to the sockets the process holds (/proc/<pid>/net is not
    per process, so: the backends whose client_port belongs to a socket of ``pid``)."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(autocommit=True, **params) as conn:
        while not stop.is_set():
            ports = _local_ports(pid)
            rows = conn.execute(
                "SELECT client_port FROM pg_stat_activity WHERE datname = current_database()"
            ).fetchall()
            seen.append(sum(1 for (port,) in rows if port in ports))
            stop.wait(0.02)


def _local_ports(pid: int) -> set[int]:
    """The local TCP ports of ``pid``'s sockets (from /proc: its socket inodes, then the table)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.slow
def test_a_burst_of_posts_is_all_accepted_within_the_pool(web, django_user_model):
    url, pid, log = web
    user = django_user_model.objects.create_user("burst", password="pw-burst-123")
    token = m.ApiToken.issue(user)[1]

    async def burst() -> list[int]:
        limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, limits=limits, timeout=120
        ) as client:
            answers = await asyncio.gather(
                *(
                    client.post(f"/api/agents/ops/sessions/burst-{n}/turns?wait=false", json={"text": "stock tea"})
                    for n in range(BURST)
                )
            )
        return [a.status_code for a in answers]

    stop, seen = threading.Event(), []
    sampler = threading.Thread(target=_sample_connections, args=(pid, stop, seen), daemon=True)
    if is_postgres():
        sampler.start()
    try:
        statuses = asyncio.run(burst())
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join(10)
    assert statuses == [202] * BURST, {s: statuses.count(s) for s in set(statuses)}
    assert m.Turn.objects.filter(session__key__startswith="burst-").count() == BURST
    if is_postgres():
        print(f"\nthe web process held at most {max(seen)} connections (pool {POOL}) over {len(seen)} samples")
        assert seen and max(seen) <= POOL
        assert max(seen) >= 1
