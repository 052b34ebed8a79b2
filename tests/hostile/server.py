"""A real daphne for the probes that only a server shows (request bodies, concurrent probes):
started on the test database with a temporary directory of its own, so the bytes it spools to
disk can be counted, and a raw HTTP/1.1 client that sends headers and a body exactly as asked."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.conf import settings

from tests.integration.test_api_sse import DEADLINE, ROOT, _stop
from tests.processes import database_url, free_port


@dataclass
class Daphne:
    url: str
    port: int
    pid: int
    tmp: Path
    log: Path

    def spooled(self) -> int:
        """Bytes the server holds in temporary files now (Twisted's request bodies, Django's
        uploads: whatever it opened under its TMPDIR, deleted or not)."""
        total = 0
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
                if target.startswith(str(self.tmp)):
                    total += os.stat(f"/proc/{self.pid}/fd/{fd}").st_size
            except OSError:  # closed meanwhile
                continue
        return total


def start_daphne(tmp: Path, **extra_env: str):
    """A generator for a module fixture: daphne on the test database, yields a ``Daphne``."""
    spool = tmp / "spool"
    spool.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "JUNE_MODEL", "PYTEST_CURRENT_TEST")}
    env.update(
        DATABASE_URL=database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        JUNE_Q_NAME=settings.Q_CLUSTER["name"],
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
        TMPDIR=str(spool),
        JUNE_VAR_DIR=str(tmp / "var"),
        **extra_env,
    )
    port = free_port()
    log = tmp / "daphne.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.2)  # polling for the server to listen
        yield Daphne(url=url, port=port, pid=proc.pid, tmp=spool, log=log)
    finally:
        _stop(proc)


@dataclass
class Answer:
    status: int
    head: bytes
    body: bytes
    sent: int  # body bytes the client had sent when the answer came


def request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str],
    *,
    body_bytes: int = 0,
    chunked: bool = False,
    chunk: int = 64 * 1024,
    timeout: float = 20.0,
    on_answer=None,
    while_sending=None,
) -> Answer:
    """Send the request line and ``headers``, then up to ``body_bytes`` of zeros (as chunks of
    a chunked body when ``chunked``) while watching for an answer, calling ``while_sending()``
    after each piece; stop sending once an answer comes, read it whole, and call
    ``on_answer()`` while the connection is still open."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(head.encode("latin-1") + b"\r\n")
        sent = 0
        deadline = time.monotonic() + timeout
        data = b"\0" * chunk
        while sent < body_bytes:
            readable, writable, _ = select.select([sock], [sock], [], max(deadline - time.monotonic(), 0))
            if readable:
                break
            assert time.monotonic() < deadline, f"no answer to {method} {path} after {sent} bytes"
            if writable:
                piece = data[: min(chunk, body_bytes - sent)]
                try:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += len(piece)
                if while_sending is not None:
                    while_sending()
        raw = b""
        while b"\r\n\r\n" not in raw:
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {method} {path} ({sent} body bytes sent)"
            sock.settimeout(left)
            piece = sock.recv(65536)
            assert piece, f"connection closed without an answer to {method} {path}"
            raw += piece
        head_bytes, _, rest = raw.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head_bytes.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(rest) < length:
            piece = sock.recv(65536)
            if not piece:
                break
            rest += piece
        if on_answer is not None:
            on_answer()
        return Answer(status=int(head_bytes.split(b" ", 2)[1]), head=head_bytes, body=rest, sent=sent)
    finally:
        sock.close()
