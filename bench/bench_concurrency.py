#!/usr/bin/env python
"""Many turns at once (issue 36) through the real HTTP API, a real daphne, real workers and the
real ``anthropic`` SDK, against a local Messages API peer that takes seconds; PostgreSQL by
default (DATABASE_URL's server, or the local one), SQLite with ``--sqlite``:

    .venv/bin/python bench/bench_concurrency.py                        # N = 1, 10, 100, 1000
    .venv/bin/python bench/bench_concurrency.py --n 1,10,100 --latency 1.0 --ws 20
    .venv/bin/python bench/bench_concurrency.py --before e5a2625       # the same run on an older commit, then this one
    .venv/bin/python bench/bench_concurrency.py --sqlite --n 1,10,100

Options (an environment variable gives each one's default): ``--n`` (BENCH_N, 1,10,100,1000),
``--latency`` seconds per model answer (BENCH_LATENCY, 1.0), ``--workers`` worker processes
(BENCH_WORKERS, 2), ``--slots`` turns per worker process (BENCH_SLOTS, 600: 1,000 turns fit in 2
processes), ``--ws K`` websocket clients (BENCH_WS, 20; ``--ws 0``: none), ``--db`` the
PostgreSQL database (BENCH_DB, june_concurrency_bench; dropped and created again), ``--timeout``
seconds to wait for one N's turns (300), ``--json PATH`` the figures as JSON, ``--before REV``,
``--pairs K`` (BENCH_PAIRS, 1) with it.

- the peer (``Peer``, in a process of its own: a threaded HTTP server speaking the Messages API's
  streaming format, SSE events as the SDK parses them) answers each request in ``--latency``
  seconds, streamed in 5 text deltas (each stamped with the peer's clock); a turn's first request
  gets a ``create_order`` tool call, its second (the tool's result in it) the final text: 2 model
  calls and 2 x latency of waiting per turn. It counts the requests of every session (the key is
  in the user's text), so "exactly once" includes "2 model calls per turn, neither repeated";
- one daphne (as the Procfile starts it: ``JUNE_PROCESS=web``, its pool ``JUNE_DB_POOL_MAX``,
  default 20) and one ``manage.py june_worker`` cluster of ``--workers`` processes
  (``JUNE_TURNS_PER_WORKER`` = ``--slots``), the demo ``ops`` agent on the ``anthropic`` provider
  (``ANTHROPIC_BASE_URL`` = the peer); rate limits and quotas off (``JUNE_RATE_LIMITS=0``: one
  user posts every turn); REDIS_URL, when set, is the channel layer (else unix sockets);
- per N: N new sessions, one ``POST /api/agents/ops/sessions/<key>/turns?wait=false`` each (an
  API token, ``Authorization: Bearer``), all at once from a process of its own (asyncio streams,
  one connection per POST), or with ``--rate R`` (BENCH_RATE) R a second, evenly spaced (an open
  loop: the rate the machine sustains, where a burst shows the backlog); then until every accepted
  turn settled.

Printed per N, with the 1-minute load average at its start and end (2 cores: above 2 the
figures are the machine's, not the code's):

- ``POSTs s``: from the burst's start until every POST was answered; ``refused``: answers other
  than 202 (by status below the table);
- ``after last``: from the last POST accepted (the server's: the last turn row's ``created_at``)
  to the last settled turn (physics: 2 x latency). Below the table: when the last 202 reached
  the client (a loaded daphne answers late: it can arrive after the turn has ended), and the CPU
  seconds daphne, the worker cluster and the POSTs' client used during the N; then (N >= 100)
  the CPU per accepted turn of each process, PostgreSQL's (the local server's processes) and the peer's
  among them, the whole machine's (``/proc/stat``) and how busy its cores were from the first
  POST to the last settle, and where that CPU alone, spread on every core, would end relative
  to the last acceptance: when the cores were busy all along, "after last" sits that far plus
  the last turns' own waiting, and only less CPU per turn shortens it;
- ``p50`` / ``p99``: each turn's latency, from its POST being sent to its turn seen settled (a
  thread polls the turns of the burst's sessions every 0.1 s, from before the first POST);
- ``db conn``: the database's connections at peak (``pg_stat_activity``, sampled every 50 ms),
  all / in use (not ``idle``); below the table, the peak by process (daphne, workers, this bench:
  each runs with its own ``PGAPPNAME``). On SQLite: the database file's open descriptors in
  daphne's and the cluster's processes;
- ``RSS MB``: the memory of the worker cluster's processes (its process group: the main process and
  its workers) at peak, as PSS (a page forked processes share counts once); ``MB/turn``:
  (peak - idle) / N, idle measured after a warm-up of 20 turns; daphne's peak below the table;
- ``once``: every accepted turn completed, exactly one terminal event each, one ``Order`` each,
  2 requests at the peer each, and no turn behind a refused POST;
- with ``--ws K``: K browsers (a logged-in session cookie; a process of their own, so the bench's
  POSTs do not delay their reads) hold a websocket on K sessions of the load, opened before the
  burst; the lag of each streamed delta behind the peer's stamp in it (same clock).

``--before REV`` first runs this same file against a scratch ``git worktree`` of REV (database
``<db>_before``: the old schema), then against this checkout, and prints the two side by side;
the worktree goes away after (``--keep`` keeps it). ``--pairs K`` runs each tree K times, in ABBA order
(before, now, now, before, ...: neither always runs second, on a machine its predecessor left
loaded), prints each pair, then per N the mean of now / before over the pairs. An older checkout can also be run by hand:
copy this file into its ``bench/`` and run it there (it needs bench/common.py's
``use_database``/``fresh_database`` and tests/fault/qcluster.py, present since long before e5a2625).

Goals (issue 36): at N = 1,000, 0 refused, after last <= 3 s (physics 2 s), RSS per concurrent
turn <= 0.5 MB, every turn exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DELTAS = 5
TERMINAL = ("turn.completed", "turn.failed", "turn.cancelled")
APPS = {"bench-web": "daphne", "bench-workers": "workers", "bench-self": "bench"}


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", default=env("BENCH_N", "1,10,100,1000"), help="turns at once, comma-separated")
    p.add_argument("--latency", type=float, default=float(env("BENCH_LATENCY", "1.0")), help="seconds per answer")
    p.add_argument("--workers", type=int, default=int(env("BENCH_WORKERS", "2")), help="worker processes")
    p.add_argument("--slots", type=int, default=int(env("BENCH_SLOTS", "600")), help="JUNE_TURNS_PER_WORKER")
    p.add_argument(
        "--ws",
        type=int,
        nargs="?",
        const=20,
        default=int(env("BENCH_WS", "20")),
        help="websocket clients on sessions of the load (0: none)",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=float(env("BENCH_RATE", "0")),
        help="POSTs a second, evenly spaced (0: every POST at once, a burst)",
    )
    p.add_argument("--db", default=env("BENCH_DB", "june_concurrency_bench"), help="PostgreSQL database (recreated)")
    p.add_argument("--sqlite", action="store_true", help="SQLite in a new folder instead of PostgreSQL")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for one N's turns")
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--before", metavar="REV", help="run the same bench on REV first (a scratch git worktree)")
    p.add_argument("--keep", action="store_true", help="--before: keep the scratch worktree")
    p.add_argument(
        "--pairs",
        type=int,
        default=int(env("BENCH_PAIRS", "1")),
        help="--before: runs of each tree, in the order before, now, now, before, ... (ABBA)",
    )
    p.add_argument("--label", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sizes = [int(n) for n in str(args.n).split(",") if n.strip()]
    return args


# -- the Messages API peer ---------------------------------------------------------------------


class Peer:
    """The Messages API, slowly: each answer streams ``DELTAS`` text pieces over ``latency``
    seconds; the first request of a turn asks for ``create_order``, the second ends the turn."""

    KEY = re.compile(r"\[bench:([A-Za-z0-9_-]+)\]")

    def __init__(self, latency: float) -> None:
        self.requests = 0
        self.calls: dict[str, list[int]] = {}  # session key -> [first requests, second requests]
        self.finished = 0  # second answers streamed to their end
        self.lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # /_counts: what the bench reads after each N
                with peer.lock:
                    body = json.dumps(
                        {"requests": peer.requests, "calls": peer.calls, "finished": peer.finished}
                    ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                try:
                    self.answer()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the worker went away mid-stream (the bench stopping it)

            def answer(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                messages = body["messages"]
                last = messages[-1]["content"]
                answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
                found = peer.KEY.search(json.dumps(messages[0]))
                with peer.lock:
                    peer.requests += 1
                    if found:
                        peer.calls.setdefault(found.group(1), [0, 0])[1 if answered else 0] += 1
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()

                def event(name: str, data: dict[str, Any]) -> None:
                    chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()

                event(
                    "message_start",
                    {
                        "type": "message_start",
                        "message": {
                            "id": "msg_b",
                            "type": "message",
                            "role": "assistant",
                            "model": "claude-sonnet-4-5",
                            "content": [],
                            "stop_reason": None,
                            "stop_sequence": None,
                            "usage": {"input_tokens": 100, "output_tokens": 1},
                        },
                    },
                )
                event(
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                )
                for _ in range(DELTAS):
                    time.sleep(latency / DELTAS)
                    event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": f"t={time.time():.6f} "},
                        },
                    )
                event("content_block_stop", {"type": "content_block_stop", "index": 0})
                stop = "end_turn"
                if not answered:
                    event(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": 1,
                            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "create_order", "input": {}},
                        },
                    )
                    event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 1,
                            "delta": {"type": "input_json_delta", "partial_json": '{"item": "mugs", "quantity": 1}'},
                        },
                    )
                    event("content_block_stop", {"type": "content_block_stop", "index": 1})
                    stop = "tool_use"
                event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": 12},
                    },
                )
                event("message_stop", {"type": "message_stop"})
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                if answered:
                    with peer.lock:
                        peer.finished += 1

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 4096

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def serve_peer(latency: float, out) -> None:
    """The peer's process."""
    out.put(Peer(latency).url)
    threading.Event().wait()


class PeerProcess:
    """The peer in a process of its own: its 2 N streams share no GIL with the bench's clients."""

    def __init__(self, latency: float) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        self.proc = ctx.Process(target=serve_peer, args=(latency, out), daemon=True)
        self.proc.start()
        self.url = out.get(timeout=60)

    def counts(self) -> tuple[int, dict[str, list[int]]]:
        """(requests in all, the requests of each session key: [first, second])."""
        import httpx

        data = httpx.get(self.url + "/_counts", timeout=60).json()
        return data["requests"], data["calls"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(10)


# -- what the processes hold -------------------------------------------------------------------


def group_pids(*pgids: int) -> dict[int, list[int]]:
    """The processes of each process group in ``pgids`` (one pass over /proc)."""
    found: dict[int, list[int]] = {g: [] for g in pgids}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    pgid = int(f.read().rsplit(")", 1)[1].split()[2])
            except (OSError, IndexError, ValueError):
                continue
            if pgid in found:
                found[pgid].append(int(pid))
    return found


def rss(pids: list[int]) -> int:
    """Memory of the processes ``pids``: their proportional set size (``Pss``), so pages a
    forked worker shares with its cluster (the SDKs imported before the fork) count once, not
    once per process as ``VmRSS`` would; ``VmRSS`` where ``smaps_rollup`` is not readable."""
    total = 0
    for pid in pids:
        total += pss_of(pid)
    return total


def pss_of(pid: int) -> int:
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return 0


def cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> float:
    """CPU seconds the local PostgreSQL server has used so far: its live processes, plus what
    the ended ones (a closed connection's backend) left in the postmaster's children's count.
    0 where no ``postgres`` process is readable (SQLite, or a server on another machine)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, _, rest = f.read().rpartition(")")
            if not head.endswith("(postgres"):
                continue
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
            if int(fields[1]) == 1 or not _is_postgres(int(fields[1])):  # the postmaster
                total += int(fields[13]) + int(fields[14])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _is_postgres(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "postgres"
    except OSError:
        return False


def machine_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, from /proc/stat (busy: everything
    but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / hz, sum(ticks[:8]) / hz


def rss_of_group(pgid: int) -> int:
    """Resident bytes of every process in the process group ``pgid``."""
    return rss(group_pids(pgid)[pgid])


def open_files(pids: list[int], path: str) -> int:
    """Descriptors open on ``path`` (SQLite's database file) in the processes ``pids``."""
    n = 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                n += os.readlink(f"/proc/{pid}/fd/{fd}") == path
            except OSError:
                continue
    return n


class Sampler:
    """Every 50 ms the database's connections (all, in use, by process), every 0.5 s the RSS of the
    cluster and of daphne; keeps the peaks."""

    def __init__(self, db: str, cluster_pgid: int, web_pgid: int, sqlite_path: str | None) -> None:
        self.db, self.cluster, self.web, self.sqlite_path = db, cluster_pgid, web_pgid, sqlite_path
        self.peak_conn, self.peak_busy, self.peak_rss, self.peak_web = 0, 0, 0, 0
        self.by_app: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn = None
        if self.sqlite_path is None:
            import psycopg

            server = os.environ["DATABASE_URL"].split("?", 1)[0].rsplit("/", 1)[0]
            conn = psycopg.connect(server + "/postgres", autocommit=True, application_name="bench-sampler")
        try:
            tick = 0
            while not self.stop.is_set():
                tick += 1
                if conn is not None:
                    rows = conn.execute(
                        "SELECT application_name, state FROM pg_stat_activity WHERE datname = %s", (self.db,)
                    ).fetchall()
                    busy = sum(1 for _, state in rows if state not in ("idle", None))
                    self.peak_busy = max(self.peak_busy, busy)
                    if len(rows) > self.peak_conn:
                        self.peak_conn = len(rows)
                        self.by_app = {}
                        for app, _ in rows:
                            name = APPS.get(app, app or "?")
                            self.by_app[name] = self.by_app.get(name, 0) + 1
                if tick % 10 == 1:  # every 0.5 s: a pass over /proc costs ms, on the machine measured
                    groups = group_pids(self.cluster, self.web)
                    if conn is None:
                        n = open_files(groups[self.cluster] + groups[self.web], self.sqlite_path)
                        self.peak_conn = max(self.peak_conn, n)
                    self.peak_rss = max(self.peak_rss, rss(groups[self.cluster]))
                    self.peak_web = max(self.peak_web, rss(groups[self.web]))
                self.stop.wait(0.05)
        finally:
            if conn is not None:
                conn.close()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


# -- the processes -----------------------------------------------------------------------------


def start_web(env: dict[str, str], workdir: Path) -> tuple[subprocess.Popen, str]:
    """One daphne as the Procfile starts it (a listen backlog of 1,024: Twisted's default of 50
    drops a burst at the handshake)."""
    import httpx

    from tests.fault.qcluster import free_port

    port = free_port()
    log = open(workdir / "daphne.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-e",
            f"tcp:port={port}:interface=127.0.0.1:backlog=1024",
            "june_project.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/api/openapi.json", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit((workdir / "daphne.log").read_text()[-3000:])
        time.sleep(0.2)  # polling for the server to listen


def stop_web(proc: subprocess.Popen) -> None:
    from bench.common import stop_group

    stop_group(proc, timeout=15)


# -- one burst ---------------------------------------------------------------------------------


async def http_post(host: str, port: int, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 POST on a connection of its own (``Connection: close``): (status, body).
    Plain asyncio streams: httpx's pool spent ~20 ms of CPU per request with 1,000 in flight,
    so the client, not the server, set the pace of the 202s."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{head}Content-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        data = await reader.read()
    finally:
        writer.close()
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    lines = head_bytes.split(b"\r\n")
    status = int(lines[0].split()[1])
    if any(line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower() for line in lines[1:]):
        chunks, rest = [], payload
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            chunks.append(rest[:size])
            rest = rest[size + 2 :]
        payload = b"".join(chunks)
    return status, payload


async def post_all(url: str, token: str, keys: list[str], rate: float = 0.0) -> dict[str, Any]:
    """POST one turn per key: all at once, or ``rate`` a second, evenly spaced (an open loop:
    a POST is sent on time whether or not the earlier ones were answered)."""
    from urllib.parse import urlsplit

    where = urlsplit(url)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    sent: dict[str, float] = {}
    answers: dict[str, tuple[int, str]] = {}
    last_accept = 0.0

    async def one(i: int, key: str) -> None:
        nonlocal last_accept
        body = json.dumps({"text": f"order mugs [bench:{key}]"}).encode()
        if rate > 0:
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        sent[key] = time.monotonic()
        try:
            status, payload = await http_post(
                where.hostname, where.port, f"/api/agents/ops/sessions/{key}/turns?wait=false", headers, body
            )
        except (OSError, ValueError, IndexError) as e:  # a reset or refused connection is a refusal too
            answers[key] = (0, type(e).__name__)
            return
        if status == 202:
            last_accept = max(last_accept, time.monotonic())
            answers[key] = (202, json.loads(payload)["turn_id"])
        else:
            answers[key] = (status, "")

    t0 = time.monotonic()
    await asyncio.gather(*(one(i, k) for i, k in enumerate(keys)))
    return {"sent": sent, "answers": answers, "post_s": time.monotonic() - t0, "last_accept": last_accept, "t0": t0}


def poster(url: str, token: str, keys: list[str], rate: float, out) -> None:
    """A process of its own (the bench's poller would delay its reads): every POST at once;
    the times are ``time.monotonic()``, one clock for every process of the machine."""
    result = asyncio.run(post_all(url, token, keys, rate))
    result["cpu_s"] = time.process_time()
    out.put(result)


def post_burst(url: str, token: str, keys: list[str], rate: float = 0.0) -> dict[str, Any]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=poster, args=(url, token, keys, rate, out), daemon=True)
    proc.start()
    result = out.get(timeout=1800)
    proc.join(30)
    return result


async def watch(url: str, cookie: str, key: str, lags: list[float], ready: list[int]) -> None:
    """A browser's websocket on one session of the load: every delta's lag behind the peer's
    stamp in it (the text a delta repeats, by its offset, is counted once)."""
    import websockets

    async with websockets.connect(
        f"{url.replace('http', 'ws')}/ws/agents/ops/sessions/{key}/",
        origin=url,
        additional_headers={"Cookie": cookie},
        max_queue=None,
        open_timeout=120,
    ) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), 120)).get("type") != "ready":
            pass
        ready[0] += 1
        text, base = "", None
        while True:
            frame = json.loads(await ws.recv())
            now = time.time()
            kind = frame.get("type")
            if kind == "message.delta":
                if frame.get("base") != base:
                    text, base = "", frame.get("base")
                offset = frame.get("offset", len(text))
                if offset <= len(text):
                    rebuilt = text[:offset] + frame.get("text", "")
                    fresh = rebuilt[len(text) :]
                    text = max(rebuilt, text, key=len)
                    lags.extend(now - float(t) for t in re.findall(r"t=(\d+\.\d+)", fresh))
            elif kind in TERMINAL:
                return


def watchers(url: str, cookie: str, keys: list[str], opened, stop, out) -> None:
    """A process of its own (the bench's POSTs would delay its reads): the websockets on
    ``keys``; ``opened`` set once all are ready, the lags put on ``out`` when every one saw its
    turn end or ``stop`` is set."""
    lags: list[float] = []

    async def main() -> None:
        ready = [0]
        tasks = {asyncio.ensure_future(watch(url, cookie, k, lags, ready)) for k in keys}
        while ready[0] < len(keys):
            if any(t.done() for t in tasks):
                break  # a websocket refused: the parent sees no `opened` and gives up
            await asyncio.sleep(0.02)
        opened.set()
        while tasks and not stop.is_set():
            _, tasks = await asyncio.wait(tasks, timeout=0.2)
        for t in tasks:
            t.cancel()

    try:
        asyncio.run(main())
    finally:
        out.put(lags)


class Settled(threading.Thread):
    """Every ``interval`` s (0.1): which turns of the sessions ``<prefix>*`` (on PostgreSQL: created
    since the poller started) have settled (completed, failed or cancelled); the first time each
    was seen, after the query returned."""

    def __init__(self, prefix: str, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.prefix, self.interval = prefix, interval
        self.ended: dict[str, float] = {}
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        from django.db import connection

        from sessions_app import models as m

        # PostgreSQL: the turns created since the poller started (the ``turn_created_at`` index),
        # settled, the ones already seen dropped here. Asking the server to join every session of
        # the burst and drop the seen ids (``NOT (id = ANY(seen))``) was ~10 ms of PostgreSQL's
        # CPU a poll by the burst's end, 10 polls a second, taken from the processes measured.
        turns, sessions = m.Turn._meta.db_table, m.Session._meta.db_table
        settled = "t.status IN ('completed', 'failed', 'cancelled')"
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT now()")
                since = cursor.fetchone()[0]
            sql, params = f"SELECT t.id FROM {turns} t WHERE t.created_at >= %s AND {settled}", [since]
        else:
            sql = f"SELECT t.id FROM {turns} t JOIN {sessions} s ON s.id = t.session_id WHERE s.agent = %s AND s.key LIKE %s AND {settled}"
            params = ["ops", self.prefix + "%"]
        try:
            while not self.stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute(sql, params)
                    ids = [row[0] for row in cursor.fetchall()]
                now = time.monotonic()
                for turn_id in ids:
                    self.ended.setdefault(turn_id, now)
                self.stop.wait(self.interval)
        finally:
            connection.close()

    def finish(self) -> None:
        self.stop.set()
        self.join()


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] if values else float("nan")


class Bench:
    def __init__(
        self,
        args: argparse.Namespace,
        url: str,
        token: str,
        cookie: str,
        peer: PeerProcess,
        cluster_pgid: int,
        web_pgid: int,
        sqlite_path: str | None,
    ) -> None:
        self.args, self.url, self.token, self.cookie, self.peer = args, url, token, cookie, peer
        self.cluster_pgid, self.web_pgid, self.sqlite_path = cluster_pgid, web_pgid, sqlite_path
        self.idle_rss = rss_of_group(cluster_pgid)

    def open_watchers(self, keys: list[str]):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        opened, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        proc = ctx.Process(target=watchers, args=(self.url, self.cookie, keys, opened, stop, out), daemon=True)
        proc.start()
        if not opened.wait(120):
            raise SystemExit("the websockets did not open")
        return proc, stop, out

    @staticmethod
    def close_watchers(proc, stop, out, grace: float) -> list[float]:
        """Up to ``grace`` s for the websockets to see their turns end, then stop them."""
        import queue

        deadline = time.monotonic() + grace
        lags = None
        while lags is None and time.monotonic() < deadline:
            try:
                lags = out.get(timeout=0.2)
            except queue.Empty:
                pass
        if lags is None:
            stop.set()
            lags = out.get(timeout=30)
        proc.join(10)
        return lags

    def run(self, n: int, websockets: int = 0, timeout: float | None = None) -> dict[str, Any]:
        from django.db.models import Count, Max

        from agents_app.models import Order
        from sessions_app import models as m

        load = os.getloadavg()[0]
        requests_before = self.peer.counts()[0]
        prefix = f"c{n}x{time.monotonic_ns()}-"
        keys = [f"{prefix}{i}" for i in range(n)]
        watched = keys[: min(websockets, n)]
        ws = self.open_watchers(watched) if watched else None
        sampler = Sampler(self.args.db, self.cluster_pgid, self.web_pgid, self.sqlite_path)
        settled = Settled(prefix)
        groups = group_pids(self.cluster_pgid, self.web_pgid)
        cpu_before = cpu(groups[self.cluster_pgid]), cpu(groups[self.web_pgid])
        cpu_rest = postgres_cpu(), cpu([self.peer.proc.pid]), machine_cpu()
        cpu_self = time.process_time()  # this process: the poller, the sampler (the observer's cost)
        posted = post_burst(self.url, self.token, keys, self.args.rate if n > 1 else 0.0)
        answers, sent = posted["answers"], posted["sent"]
        accepted = {k: t for k, (status, t) in answers.items() if status == 202}
        by_turn = {t: k for k, t in accepted.items()}
        refused: dict[str, int] = {}
        for status, what in answers.values():
            if status != 202:
                name = str(status) if status else what
                refused[name] = refused.get(name, 0) + 1
        deadline = time.monotonic() + (self.args.timeout if timeout is None else timeout)
        timed_out = False
        while not all(t in settled.ended for t in by_turn):
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.1)  # the figures are the poller's (Settled), this only waits for it
        settled.finish()
        sampler.finish()
        groups = group_pids(self.cluster_pgid, self.web_pgid)
        cpu_workers, cpu_web = (
            cpu(groups[self.cluster_pgid]) - cpu_before[0],
            cpu(groups[self.web_pgid]) - cpu_before[1],
        )
        cpu_self = time.process_time() - cpu_self
        machine = machine_cpu()
        cpu_pg, cpu_peer = postgres_cpu() - cpu_rest[0], cpu([self.peer.proc.pid]) - cpu_rest[1]
        busy, ticks = machine[0] - cpu_rest[2][0], machine[1] - cpu_rest[2][1]
        ended = {t: at for t, at in settled.ended.items() if t in by_turn}
        done = max(ended.values()) if ended else time.monotonic()
        lags = self.close_watchers(*ws, grace=10 if not timed_out else 0) if ws else []
        latency = [ended[t] - sent[k] for t, k in by_turn.items() if t in ended]
        ids = list(by_turn)
        # the server's acceptance: the last turn row's created_at, on the monotonic clock
        last_created = m.Turn.objects.filter(pk__in=ids).aggregate(at=Max("created_at"))["at"] if ids else None
        last_created = last_created.timestamp() - (time.time() - time.monotonic()) if last_created else None
        completed = m.Turn.objects.filter(pk__in=ids, status="completed").count()
        terminal = dict(
            m.Event.objects.filter(turn_id__in=ids, type__in=TERMINAL)
            .values("turn_id")
            .annotate(k=Count("seq"))
            .values_list("turn_id", "k")
        )
        orders = dict(
            Order.objects.filter(turn_id__in=ids).values("turn_id").annotate(k=Count("id")).values_list("turn_id", "k")
        )
        refused_keys = [k for k in keys if k not in accepted]
        ghosts = (
            m.Turn.objects.filter(session__agent="ops", session__key__in=refused_keys).count() if refused_keys else 0
        )
        requests, calls = self.peer.counts()
        calls_right = sum(1 for k in accepted if calls.get(k) == [1, 1])
        calls_total = sum(sum(calls.get(k, [0, 0])) for k in keys)
        once = {
            "completed": completed,
            "one_terminal": sum(1 for t in ids if terminal.get(t) == 1),
            "repeated_terminal": sum(1 for t in ids if terminal.get(t, 0) > 1),
            "one_order": sum(1 for t in ids if orders.get(t) == 1),
            "two_calls": calls_right,
            "calls": calls_total,
            "ghosts": ghosts,
        }
        exactly_once = (
            not timed_out
            and completed == len(ids) == once["one_terminal"] == once["one_order"] == calls_right
            and once["repeated_terminal"] == 0
            and ghosts == 0
            and calls_total == 2 * len(ids)
        )
        return {
            "n": n,
            "accepted": len(ids),
            "refused": sum(refused.values()),
            "refused_by": refused,
            "post_s": posted["post_s"],
            "accepted_s": (last_created - posted["t0"]) if last_created else None,
            "after_last_s": ((time.monotonic() if timed_out else done) - last_created) if last_created else None,
            "last_202_s": (posted["last_accept"] - posted["t0"]) if ids else None,
            "after_last_202_s": ((time.monotonic() if timed_out else done) - posted["last_accept"]) if ids else None,
            "cpu_web_s": cpu_web,
            "cpu_workers_s": cpu_workers,
            "cpu_client_s": posted["cpu_s"],
            "cpu_bench_s": cpu_self,
            "cpu_pg_s": cpu_pg,
            "cpu_peer_s": cpu_peer,
            "cpu_machine_s": busy,
            "machine_busy": busy / ticks if ticks > 0 else None,
            "settled": len(ended),
            "timed_out": timed_out,
            "p50": pct(latency, 50) if latency else None,
            "p99": pct(latency, 99) if latency else None,
            "conn": sampler.peak_conn,
            "conn_busy": sampler.peak_busy if self.sqlite_path is None else None,
            "conn_by": sampler.by_app,
            "rss_mb": sampler.peak_rss / 2**20,
            "idle_rss_mb": self.idle_rss / 2**20,
            "per_turn_mb": max(sampler.peak_rss - self.idle_rss, 0) / 2**20 / max(n, 1),
            "web_rss_mb": sampler.peak_web / 2**20,
            "exactly_once": exactly_once,
            "once": once,
            "requests": requests - requests_before,
            "ws_clients": len(watched),
            "ws_deltas": len(lags),
            "ws_expected": sum(2 * DELTAS for k in watched if k in accepted),
            "ws_p50_ms": pct(lags, 50) * 1000 if lags else None,
            "ws_p99_ms": pct(lags, 99) * 1000 if lags else None,
            "load": load,
            "load_end": os.getloadavg()[0],
        }


# -- printing ----------------------------------------------------------------------------------


def f(value: Any, fmt: str, width: int) -> str:
    return f"{'-' if value is None else format(value, fmt):>{width}}"


HEADER = (
    f"{'N':>6}{'POSTs s':>9}{'refused':>9}{'after last':>11}{'p50 s':>8}{'p99 s':>8}{'db conn':>10}"
    f"{'RSS MB':>8}{'MB/turn':>9}{'once':>6}{'load 1m':>13}"
)


def row(r: dict[str, Any]) -> str:
    after = f(r["after_last_s"], ".2f", 11)
    if r["timed_out"]:
        after = f"{'>' + format(r['after_last_s'] or 0, '.0f'):>11}"
    return (
        f"{r['n']:>6}{r['post_s']:9.2f}{r['refused']:9d}{after}{f(r['p50'], '.2f', 8)}{f(r['p99'], '.2f', 8)}"
        f"{str(r['conn']) + ('/' + str(r['conn_busy']) if r['conn_busy'] is not None else ''):>10}{r['rss_mb']:8.0f}{r['per_turn_mb']:9.3f}"
        f"{'yes' if r['exactly_once'] else 'NO':>6}{r['load']:7.2f}→{r['load_end']:<5.2f}"
    )


def details(r: dict[str, Any]) -> list[str]:
    lines = []
    if r["conn_by"]:
        lines.append(
            "db connections at peak by process: "
            + ", ".join(f"{k} {v}" for k, v in sorted(r["conn_by"].items()))
            + f"; daphne RSS at peak {r['web_rss_mb']:.0f} MB"
        )
    else:
        lines.append(f"daphne RSS at peak {r['web_rss_mb']:.0f} MB")
    if r.get("accepted_s") is not None:
        lines.append(
            f"the server created the last turn {r['accepted_s']:.2f} s into the burst, the last 202 arrived "
            f"{r['last_202_s']:.2f} s in ("
            + (f"the last turn settled {r['after_last_202_s']:+.2f} s after it" if not r["timed_out"] else "timed out")
            + "); CPU s: "
            f"daphne {r['cpu_web_s']:.1f}, workers {r['cpu_workers_s']:.1f}, the POSTs' client {r['cpu_client_s']:.1f}, "
            f"this bench (poller, sampler) {r.get('cpu_bench_s', float('nan')):.1f}"
        )
    if r.get("cpu_machine_s") is not None and r["accepted"] >= 100:  # below, the fixed costs (the
        lines.append(cpu_line(r))  # poller, the client's start) are most of it
    if r["ws_p99_ms"] is not None:
        lines.append(
            f"websocket deltas on {r['ws_clients']} sessions of the load: p50 {r['ws_p50_ms']:.1f} ms, "
            f"p99 {r['ws_p99_ms']:.1f} ms behind the peer ({r['ws_deltas']} of the peer's "
            f"{r['ws_expected']} deltas arrived)"
        )
    if r["refused"]:
        lines.append(f"refused by status: {r['refused_by']}")
    if r["timed_out"]:
        lines.append(f"timed out: {r['settled']} of {r['accepted']} accepted turns settled within the timeout")
    if not r["exactly_once"]:
        o = r["once"]
        lines.append(
            f"{o['completed']}/{r['accepted']} completed, {o['one_terminal']} one terminal event, "
            f"{o['repeated_terminal']} more than one, {o['one_order']} one order, {o['two_calls']} 2 model "
            f"calls ({o['calls']} in all), {o['ghosts']} turns behind refused POSTs"
        )
    return lines


def cpu_line(r: dict[str, Any]) -> str:
    """CPU per accepted turn by process, and what the machine's CPU alone says of 'after last':
    spread evenly on every core, the CPU the run used ends ``floor`` s after the last acceptance.
    When the machine was busy all along, 'after last' is near that floor: the run is CPU-bound,
    and only less CPU per turn (not better scheduling) shortens it."""
    per = 1000 / r["accepted"]
    parts = (
        ("daphne", r["cpu_web_s"]),
        ("workers", r["cpu_workers_s"]),
        ("PostgreSQL", r.get("cpu_pg_s") or 0.0),
        ("peer", r.get("cpu_peer_s") or 0.0),
        ("client", r["cpu_client_s"]),
        ("bench", r.get("cpu_bench_s") or 0.0),
    )
    floor = r["cpu_machine_s"] / (os.cpu_count() or 1) - (r["accepted_s"] or 0.0)
    busy = r.get("machine_busy")
    return (
        "CPU ms per turn: "
        + ", ".join(f"{name} {seconds * per:.1f}" for name, seconds in parts)
        + f"; the machine {r['cpu_machine_s'] * per:.1f} ("
        + (f"busy {busy:.0%} of its {os.cpu_count()} cores" if busy is not None else "")
        + f"); that CPU on every core ends {floor:+.2f} s after the last acceptance"
    )


def load3() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


# -- a whole run -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    os.environ["PGAPPNAME"] = "bench-self"
    if args.sqlite:
        os.environ.pop("DATABASE_URL", None)
    from bench.common import fresh_database, use_database

    use_database(args.db, postgres_by_default=not args.sqlite)
    os.environ["JUNE_RATE_LIMITS"] = "0"
    fresh_database(args.db)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client as DjangoClient

    from sessions_app import models as m
    from tests.fault.qcluster import Clusters, database_url

    peer = PeerProcess(args.latency)
    user = get_user_model().objects.create_user("bench")
    token = m.ApiToken.issue(user, name="bench")[1]
    workdir = Path(tempfile.mkdtemp(prefix="june-bench-conc-"))
    common = {
        "JUNE_MODEL": "anthropic",
        "ANTHROPIC_API_KEY": "bench-key",
        "ANTHROPIC_BASE_URL": peer.url,
        "LOG_LEVEL": "WARNING",
        "SECRET_KEY": settings.SECRET_KEY,
        "JUNE_RATE_LIMITS": "0",
    }
    # with per-user rate limits off (JUNE_RATE_LIMITS=0) one user may start every turn; the
    # limits themselves, generous, in case a build reads them without the switch
    common.update(
        JUNE_RATE_TURNS_PER_MINUTE="1000000",
        JUNE_QUOTA_TOKENS_PER_DAY="1000000000000",
        JUNE_QUOTA_AGENT_TOKENS_PER_DAY="1000000000000",
    )
    if os.environ.get("REDIS_URL"):
        common.setdefault("JUNE_CHANNEL_PREFIX", os.environ.get("JUNE_CHANNEL_PREFIX") or f"bench-conc-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        common,
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="june_project.settings",
        DEBUG="0",
        JUNE_Q_NAME=settings.Q_CLUSTER["name"],
        JUNE_PROCESS="web",
        PGAPPNAME="bench-web",
    )
    sqlite_path = None if connection.vendor == "postgresql" else str(Path(connection.settings_dict["NAME"]).resolve())
    web, url = start_web(env, workdir)
    clusters = Clusters(
        workdir,
        JUNE_Q_WORKERS=str(args.workers),
        JUNE_TURNS_PER_WORKER=str(args.slots),
        JUNE_LEASE_SECONDS="30",
        JUNE_SWEEP_SECONDS="5",
        JUNE_Q_POLL="0.05",
        JUNE_AGENT_DIRS="",
        PGAPPNAME="bench-workers",
        **common,
    )
    cluster = clusters.start()
    browser = DjangoClient()
    browser.force_login(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    label = f" [{args.label}]" if args.label else ""
    results: list[dict[str, Any]] = []
    try:
        from tests.fault.qcluster import wait_for

        wait_for(
            lambda: len(group_pids(cluster.pid)[cluster.pid]) >= args.workers + 1 or not cluster.alive(),
            timeout=60,
            what="the cluster's processes",
        )
        time.sleep(2)  # the workers' imports
        if not cluster.alive():
            raise SystemExit(cluster.output()[-3000:])
        warm = Bench(args, url, token, cookie, peer, cluster.pid, web.pid, sqlite_path)
        warm.run(20, timeout=max(args.timeout, 300))  # both workers warm: imports, SDK clients, pools
        bench = Bench(args, url, token, cookie, peer, cluster.pid, web.pid, sqlite_path)
        pooled = "JUNE_DB_POOL_MAX" in (ROOT / "june_project" / "settings.py").read_text()  # not before issue 36
        pool = (
            ""
            if sqlite_path
            else (
                f", daphne's pool max {os.environ.get('JUNE_DB_POOL_MAX', '20')}"
                if pooled
                else ", no pool (a connection per request thread)"
            )
        )
        git = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
        print(
            f"bench_concurrency{label}: {git.stdout.strip()[:72]}\n"
            f"database: {connection.vendor} ({args.db if sqlite_path is None else sqlite_path}){pool}; "
            f"channel layer: {'redis' if os.environ.get('REDIS_URL') else 'unix sockets'}; peer: {args.latency:.1f} s "
            f"per answer, 2 per turn; POSTs: {f'{args.rate:g} a second' if args.rate > 0 else 'all at once'}; "
            f"workers: {args.workers} x {args.slots} slots; cluster idle RSS "
            f"{bench.idle_rss / 2**20:.0f} MB; load average {load3()} ({os.cpu_count()} cores)\n",
            flush=True,
        )
        print(HEADER, flush=True)
        for n in args.sizes:
            r = bench.run(n, args.ws)
            results.append(r)
            print(row(r), flush=True)
            for line in details(r):
                print("        " + line, flush=True)
            if r["timed_out"]:
                print(f"        (the larger N are skipped: {r['accepted'] - r['settled']} turns still queued)")
                break
        print(
            f"\nphysics: 2 model calls x {args.latency:.1f} s = {2 * args.latency:.1f} s per turn; 'after last': from the "
            f"server's acceptance of the last POST to the last settled turn; 'db conn': all/in use at peak (SQLite: "
            f"descriptors on the database file); load average at the end "
            f"{load3()}",
            flush=True,
        )
    finally:
        clusters.stop_all()
        stop_web(web)
        peer.stop()
    return results


def compare(before: list[dict[str, Any]], now: list[dict[str, Any]], rev: str, title: str = "same run") -> None:
    """The two runs side by side, per N."""
    print(f"\nbefore ({rev}) → now, same machine, {title}:")
    print(
        f"{'N':>6}{'POSTs s':>16}{'refused':>14}{'after last s':>17}{'p99 s':>16}{'db conn':>12}{'MB/turn':>16}"
        f"{'once':>11}{'load 1m':>13}"
    )
    old = {r["n"]: r for r in before}
    for r in now:
        b = old.get(r["n"])
        if b is None:
            continue

        def pair(key: str, fmt: str, width: int) -> str:
            def one(x: dict[str, Any]) -> str:
                v = x[key]
                if key == "after_last_s" and x["timed_out"]:
                    return f">{v or 0:.0f}"
                return "-" if v is None else format(v, fmt)

            return f"{one(b) + ' → ' + one(r):>{width}}"  # noqa: B023 (called at once, in this iteration)

        print(
            f"{r['n']:>6}{pair('post_s', '.2f', 16)}{pair('refused', 'd', 14)}{pair('after_last_s', '.2f', 17)}"
            f"{pair('p99', '.2f', 16)}{pair('conn', 'd', 12)}{pair('per_turn_mb', '.3f', 16)}"
            f"{('yes' if b['exactly_once'] else 'NO') + ' → ' + ('yes' if r['exactly_once'] else 'NO'):>11}"
            f"{b['load']:6.2f} / {r['load']:<5.2f}"
        )
        print(
            f"{'':>6}  CPU s: daphne {b['cpu_web_s']:.1f} → {r['cpu_web_s']:.1f}, "
            f"workers {b['cpu_workers_s']:.1f} → {r['cpu_workers_s']:.1f}"
        )


def summary(pairs: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]], rev: str) -> None:
    """Per N, the mean of now / before over the pairs of runs (each pair: one run of each tree,
    back to back, the first of the two alternating), and each pair's ratio."""
    print(f"\nnow / before ({rev}), {len(pairs)} pairs of runs, ABBA order; mean, then each pair:")
    keys = (("after_last_s", "after last"), ("post_s", "POSTs"), ("cpu_web_s", "daphne CPU"))
    keys += (("cpu_workers_s", "workers CPU"), ("cpu_pg_s", "PostgreSQL CPU"), ("cpu_machine_s", "machine CPU"))
    keys += (("p50", "p50"), ("p99", "p99"))
    for n in sorted({r["n"] for _, now in pairs for r in now}):
        cells = []
        for key, name in keys:
            ratios = []
            for before, now in pairs:
                b = next((r for r in before if r["n"] == n), None)
                a = next((r for r in now if r["n"] == n), None)
                if a and b and a.get(key) and b.get(key) and not (a["timed_out"] or b["timed_out"]):
                    ratios.append(a[key] / b[key])
            if ratios:
                each = ", ".join(f"{x:.2f}" for x in ratios)
                cells.append(f"{name} {sum(ratios) / len(ratios):.2f} ({each})")
        print(f"{n:>6}  " + "; ".join(cells))


def run_before(args: argparse.Namespace, argv: list[str]) -> None:
    """This file against a scratch worktree of ``args.before`` (its own database), then here;
    ``--pairs K``: K runs of each, in ABBA order (before, now, now, before, ...), so neither tree
    always runs second, on a machine its predecessor left loaded."""
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.before], capture_output=True, text=True, check=True
    ).stdout.strip()
    scratch = Path(tempfile.mkdtemp(prefix="june-bench-before-")) / rev
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(scratch), rev], check=True, capture_output=True
    )
    out = Path(tempfile.mkdtemp(prefix="june-bench-json-"))
    try:
        shutil.copy(__file__, scratch / "bench" / "bench_concurrency.py")
        child = [a for a in argv]
        for flag in ("--before", "--pairs"):
            i = child.index(flag) if flag in child else None
            if i is not None:
                del child[i : i + 2]
            else:
                child = [a for a in child if not a.startswith(flag + "=")]
        child = [a for a in child if a != "--keep"]

        def one(which: str, k: int) -> list[dict[str, Any]]:
            tree, db = (scratch, f"{args.db}_before") if which == "before" else (ROOT, args.db)
            label = f"before: {rev}" if which == "before" else "now"
            path = out / f"{which}{k}.json"
            subprocess.run(
                [sys.executable, str(tree / "bench" / "bench_concurrency.py"), *child, "--db", db]
                + ["--label", f"{label}, run {k + 1}", "--json", str(path)],
                cwd=tree,
                env={**os.environ, "BENCH_DB": db},
                check=True,
            )
            print(flush=True)
            return json.loads(path.read_text())

        pairs: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
        for k in range(max(args.pairs, 1)):
            if k % 2 == 0:
                before = one("before", k)
                now = one("now", k)
            else:
                now = one("now", k)
                before = one("before", k)
            pairs.append((before, now))
        for k, (before, now) in enumerate(pairs):
            compare(before, now, rev, "same run" if len(pairs) == 1 else f"pair {k + 1} of {len(pairs)}")
        if len(pairs) > 1:
            summary(pairs, rev)
        if args.json:
            runs = [{"before": b, "now": a} for b, a in pairs]
            Path(args.json).write_text(json.dumps({"pairs": runs, "rev": rev}, indent=1))
    finally:
        if args.keep:
            print(f"scratch worktree kept: {scratch} (git worktree remove --force {scratch})")
        else:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch)], capture_output=True)
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    argv = sys.argv[1:]
    args = arguments(argv)
    if args.before:
        run_before(args, argv)
        return
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
