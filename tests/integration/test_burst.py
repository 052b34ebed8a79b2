"""A burst of requests against one real daphne: every POST is accepted (202), none refused, the
start pool runs no more threads than ``JUNE_WEB_STARTS`` (its default), and on PostgreSQL the web
process never holds more connections than its pool allows — a request waits for a connection
instead of opening one of its own (PostgreSQL's max_connections ran out
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
#: the start pool's threads by default (``JUNE_WEB_STARTS``), and daphne's own beside them (its
#: loop, the waker, the database pool's workers…)
STARTS = 10
OWN_THREADS = 10


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


def _sample_threads(pid: int, stop: threading.Event, seen: list[int]) -> None:
    while not stop.is_set():
        seen.append(len(os.listdir(f"/proc/{pid}/task")))
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

    stop, seen, threads = threading.Event(), [], []
    sampler = threading.Thread(target=_sample_connections, args=(pid, stop, seen), daemon=True)
    counter = threading.Thread(target=_sample_threads, args=(pid, stop, threads), daemon=True)
    if is_postgres():
        sampler.start()
    counter.start()
    try:
        statuses = asyncio.run(burst())
    finally:
        stop.set()
        for thread in (sampler, counter):
            if thread.is_alive():
                thread.join(10)
    assert statuses == [202] * BURST, {s: statuses.count(s) for s in set(statuses)}
    assert threads and max(threads) <= STARTS + OWN_THREADS, f"daphne ran {max(threads)} threads in the burst"
    assert m.Turn.objects.filter(session__key__startswith="burst-").count() == BURST
    if is_postgres():
        print(f"\nthe web process held at most {max(seen)} connections (pool {POOL}) over {len(seen)} samples")
        assert seen and max(seen) <= POOL
        assert max(seen) >= 1


def _frames(sock, want: int) -> bytes:
    data = b""
    while len(data) < want:
        chunk = sock.recv(want - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data


def test_a_refused_socket_waits_seconds_for_the_browsers_close_frame(web):
    """A refusal is an accept, then a close frame with the code (4401: not logged in). A browser
    on a loaded machine can take over a second to answer that frame; daphne's default (1 s) then
    reset the connection and the browser, its frame unread, reported 1006 (CI, a 4403 test). The
    server now keeps the connection open 5 s for the answer."""
    import base64
    import socket
    import struct

    url, _pid, _log = web
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                "GET /ws/agents/ops/sessions/refused/ HTTP/1.1\r\n"
                f"Host: {host}:{port}\r\nOrigin: {url}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += _frames(sock, 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        code = None
        while code is None:  # the error message (text), then the close frame
            first, length = _frames(sock, 2)
            if length == 126:
                (length,) = struct.unpack("!H", _frames(sock, 2))
            payload = _frames(sock, length)
            if first & 0x0F == 0x8:
                (code,) = struct.unpack("!H", payload[:2])
        assert code == 4401
        sent = time.monotonic()
        sock.settimeout(2.5)
        with pytest.raises(socket.timeout):  # no answer from us: the server still waits
            sock.recv(1)
        assert time.monotonic() - sent >= 2.4
        mask = os.urandom(4)
        body = struct.pack("!H", 4401)
        sock.sendall(bytes([0x88, 0x80 | len(body)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(body)))
        sock.settimeout(10)
        try:
            rest = sock.recv(1)
        except ConnectionResetError:
            rest = b""
        assert rest == b""  # answered: the server ends the connection
    finally:
        sock.close()
