#!/usr/bin/env python
"""Many turns at once through the real HTTP API, real workers and the real ``anthropic`` SDK,
against a local Messages API peer that takes seconds (PostgreSQL by default):

    .venv/bin/python bench/bench_concurrency.py                   # N = 1, 10, 100, 1000
    BENCH_N=1,10,100 BENCH_LATENCY=1.0 .venv/bin/python bench/bench_concurrency.py

- the peer (``Peer``: a threaded HTTP server speaking the Messages API's streaming format)
  answers each request after ``BENCH_LATENCY`` seconds (default 1.0), streamed in 5 deltas
  over that time: a turn's first request gets a ``create_order`` tool call, its second (the
  tool's result is in it) the final text — 2 model calls, 2 s of waiting per turn;
- one daphne (``JUNE_DB_POOL_MAX`` 20) and one ``june_worker`` cluster of 2 worker processes
  (``JUNE_TURNS_PER_WORKER``: ``BENCH_SLOTS``, default 600, so 1,000 turns fit in 2 processes),
  the demo ``ops`` agent on the ``anthropic`` provider (``ANTHROPIC_BASE_URL`` = the peer), rate
  limits off (one user posts them all);
- per N: N sessions, one ``POST …/turns?wait=false`` each, all at once; then until every turn
  has completed. Printed: the time until every POST was answered, POSTs refused, the wall time
  from the last accepted POST to the last completion (physics: 2 x latency), turn latency
  p50 / p99 (the burst's start -> settled, polled every 20 ms), the database's connections at peak (``pg_stat_activity``),
  the worker cluster's RSS at peak over its idle RSS, per concurrent turn, and that every turn
  completed exactly once (one ``turn.completed`` each, one Order each, 2 N requests at the
  peer); the load average beside each row; and the lag of the streamed deltas behind the peer
  (its stamp in each delta) on ``BENCH_WS`` (default 20) websockets opened, as browsers, on
  sessions of the load before the burst.

Goals (issue 36): at 1,000, 0 refused, wall after the last POST <= 3 s (physics 2 s), RSS per
concurrent turn <= 0.5 MB.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
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
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_concurrency_bench")
use_database(BENCH_DB, postgres_by_default=True)
os.environ["JUNE_RATE_LIMITS"] = "0"

SIZES = [int(n) for n in os.environ.get("BENCH_N", "1,10,100,1000").split(",")]
LATENCY = float(os.environ.get("BENCH_LATENCY", "1.0"))
SLOTS = int(os.environ.get("BENCH_SLOTS", "600"))
WATCHERS = int(os.environ.get("BENCH_WS", "20"))  # websockets on sessions of the load (delta latency)
DELTAS = 5


class Peer:
    """The Messages API, slowly: each answer streams ``DELTAS`` text pieces over ``LATENCY``."""

    def __init__(self) -> None:
        self.requests = 0
        self.lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                with peer.lock:
                    peer.requests += 1
                last = body["messages"][-1]["content"]
                answered = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()

                def event(name: str, data: dict[str, Any]) -> None:
                    chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()

                event("message_start", {"type": "message_start", "message": {
                    "id": "msg_b", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": 100, "output_tokens": 1}}})
                event("content_block_start", {"type": "content_block_start", "index": 0,
                                              "content_block": {"type": "text", "text": ""}})
                for i in range(DELTAS):
                    time.sleep(LATENCY / DELTAS)
                    event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": f"t={time.time():.6f} "}})
                event("content_block_stop", {"type": "content_block_stop", "index": 0})
                stop = "end_turn"
                if not answered:
                    event("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
                        "type": "tool_use", "id": "toolu_1", "name": "create_order", "input": {}}})
                    event("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
                        "type": "input_json_delta", "partial_json": '{"item": "mugs", "quantity": 1}'}})
                    event("content_block_stop", {"type": "content_block_stop", "index": 1})
                    stop = "tool_use"
                event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                        "usage": {"output_tokens": 12}})
                event("message_stop", {"type": "message_stop"})
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 4096

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def rss_of_group(pgid: int) -> int:
    """Resident bytes of every process in the process group ``pgid`` (the cluster's)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except (OSError, IndexError, ValueError):
            continue
    return total


class Sampler:
    """Every 50 ms: the database's connections (PostgreSQL) and the cluster's RSS; keeps the peaks."""

    def __init__(self, pgid: int) -> None:
        self.pgid, self.peak_conn, self.peak_rss = pgid, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn = None
        if os.environ.get("DATABASE_URL", "").startswith("postgres"):
            import psycopg

            server, name = os.environ["DATABASE_URL"].rsplit("/", 1)
            conn = psycopg.connect(server + "/postgres", autocommit=True)
        while not self.stop.is_set():
            if conn is not None:
                n = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (BENCH_DB,)).fetchone()[0]
                self.peak_conn = max(self.peak_conn, n)
            self.peak_rss = max(self.peak_rss, rss_of_group(self.pgid))
            self.stop.wait(0.05)
        if conn is not None:
            conn.close()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


def start_web(env: dict[str, str], workdir: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    from tests.fault.qcluster import free_port

    port = free_port()
    log = open(workdir / "daphne.log", "wb")
    # a listen backlog of 1,024 (daphne's default, Twisted's, is 50: a burst past it is dropped
    # at the handshake and retried a second later, or reset); as the Procfile and the unit start it
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-e", f"tcp:port={port}:interface=127.0.0.1:backlog=1024",
                             "june_project.asgi:application"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
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
        time.sleep(0.2)


async def post_all(url: str, token: str, keys: list[str]) -> tuple[list[tuple[int, str]], float, float]:
    """POST one turn per key at once: ([(status, turn_id)], seconds until all answered, the
    monotonic time of the last accepted answer)."""
    import httpx

    limits = httpx.Limits(max_connections=len(keys) + 10, max_keepalive_connections=len(keys) + 10)
    last = [0.0]
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        async def one(key: str) -> tuple[int, str]:
            r = await client.post(f"/api/agents/ops/sessions/{key}/turns?wait=false", json={"text": "order mugs"})
            if r.status_code == 202:
                last[0] = max(last[0], time.monotonic())
                return 202, r.json()["turn_id"]
            return r.status_code, ""

        t0 = time.monotonic()
        answers = await asyncio.gather(*(one(k) for k in keys))
        return list(answers), time.monotonic() - t0, last[0]


async def watch(url: str, cookie: str, key: str, latencies: list[float], opened: asyncio.Event,
                count: list[int]) -> None:
    """A browser's websocket on one session of the load: every delta's lag behind the peer's stamp."""
    import re

    import websockets

    async with websockets.connect(f"{url.replace('http', 'ws')}/ws/agents/ops/sessions/{key}/", origin=url,
                                  additional_headers={"Cookie": cookie}, max_queue=None, open_timeout=120) as ws:
        while json.loads(await asyncio.wait_for(ws.recv(), 120)).get("type") != "ready":
            pass
        count[0] += 1
        if count[0] >= count[1]:
            opened.set()
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 600))
            now = time.time()
            if frame.get("type") == "message.delta":
                latencies.extend(now - float(t) for t in re.findall(r"t=(\d+\.\d+)", frame.get("text", "")))
            elif frame.get("type") in ("turn.completed", "turn.failed", "turn.cancelled"):
                return


async def burst(url: str, token: str, cookie: str, keys: list[str], latencies: list[float]):
    """The websockets of the first ``WATCHERS`` sessions open, then every POST at once."""
    watchers = keys[:WATCHERS] if cookie else []
    opened, count = asyncio.Event(), [0, len(watchers)]
    tasks = [asyncio.ensure_future(watch(url, cookie, k, latencies, opened, count)) for k in watchers]
    if watchers:
        await asyncio.wait_for(opened.wait(), 120)
    started = time.monotonic()
    answers, post_s, last = await post_all(url, token, keys)
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 900)
    return started, answers, post_s, last


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def run_size(n: int, url: str, token: str, cluster, peer: Peer, idle_rss: int, cookie: str = "") -> dict[str, Any]:
    from django.db.models import Count

    from agents_app.models import Order
    from sessions_app import models as m

    load = os.getloadavg()[0]
    before = peer.requests
    sampler = Sampler(cluster.pid)
    keys = [f"c{n}-{i}-{time.monotonic_ns()}" for i in range(n)]
    lags: list[float] = []
    started, answers, post_s, last_accept = asyncio.run(burst(url, token, cookie, keys, lags))
    ids = [t for status, t in answers if status == 202]
    refused: dict[int, int] = {}
    for status, _ in answers:
        if status != 202:
            refused[status] = refused.get(status, 0) + 1
    deadline = time.monotonic() + 600
    ended: dict[str, float] = {}  # turn id -> when this poll first saw it settled
    while len(ended) < len(ids):
        if time.monotonic() > deadline:
            raise SystemExit(f"N={n}: timed out")
        waiting = [t for t in ids if t not in ended]
        now = time.monotonic()
        for turn_id in m.Turn.objects.filter(pk__in=waiting, status__in=("completed", "failed", "cancelled")
                                             ).values_list("pk", flat=True):
            ended[turn_id] = now
        time.sleep(0.02)
    done = max(ended.values()) if ended else time.monotonic()
    sampler.finish()
    latency = [ended[t] - started for t in ids]  # from the POSTs' start (the burst) to settled
    completed = m.Turn.objects.filter(pk__in=ids, status="completed").count()
    once = (m.Event.objects.filter(turn_id__in=ids, type="turn.completed").values("turn_id")
            .annotate(k=Count("seq")).filter(k=1).count())
    orders = Order.objects.filter(turn_id__in=ids).count()
    return {"n": n, "post_s": post_s, "refused": refused, "after_last_s": done - last_accept if ids else 0.0,
            "p50": pct(latency, 50) if latency else 0.0, "p99": pct(latency, 99) if latency else 0.0,
            "conn": sampler.peak_conn, "rss_mb": sampler.peak_rss / 2**20,
            "per_turn_mb": max(sampler.peak_rss - idle_rss, 0) / 2**20 / max(n, 1),
            "exactly_once": completed == len(ids) == once == orders and peer.requests - before == 2 * len(ids),
            "detail": f"{completed}/{len(ids)} completed, {once} once, {orders} orders, "
                      f"{peer.requests - before} requests",
            "ws_p50": pct(lags, 50) * 1000 if lags else None, "ws_p99": pct(lags, 99) * 1000 if lags else None,
            "load": load, "load_end": os.getloadavg()[0]}


def main() -> None:
    fresh_database(BENCH_DB)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    from sessions_app import models as m
    from tests.fault.qcluster import Clusters, database_url

    peer = Peer()
    user = get_user_model().objects.create_user("bench")
    token = m.ApiToken.issue(user, name="bench")[1]
    workdir = Path(tempfile.mkdtemp(prefix="june-bench-conc-"))
    common = {"ANTHROPIC_API_KEY": "bench-key", "ANTHROPIC_BASE_URL": peer.url, "JUNE_RATE_LIMITS": "0",
              "LOG_LEVEL": "WARNING", "SECRET_KEY": settings.SECRET_KEY}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(common, DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE="june_project.settings", DEBUG="0",
               JUNE_Q_NAME=settings.Q_CLUSTER["name"])
    web, url = start_web(env, workdir)
    clusters = Clusters(workdir, JUNE_Q_WORKERS="2", JUNE_TURNS_PER_WORKER=str(SLOTS), JUNE_LEASE_SECONDS="30",
                        JUNE_SWEEP_SECONDS="5", JUNE_Q_POLL="0.05", JUNE_AGENT_DIRS="", **common)
    cluster = clusters.start()
    from django.test import Client as DjangoClient

    browser = DjangoClient()
    browser.force_login(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    try:
        time.sleep(3)  # the cluster's workers up and idle
        run_size(20, url, token, cluster, peer, rss_of_group(cluster.pid))  # warm both workers: imports, SDK clients, pools
        idle_rss = rss_of_group(cluster.pid)
        print(f"database: {connection.vendor} ({BENCH_DB})  peer latency: {LATENCY:.1f} s per answer (2 per turn)"
              f"  workers: 2 x {SLOTS} slots  cluster idle RSS: {idle_rss / 2**20:.0f} MB"
              f"  load average at start: {os.getloadavg()[0]:.2f} (2 cores)\n")
        print(f"{'N':>6}{'POSTs s':>9}{'refused':>9}{'after last':>11}{'p50 s':>7}{'p99 s':>7}{'db conn':>8}"
              f"{'RSS MB':>8}{'MB/turn':>8}{'once':>6}{'load':>12}")
        for n in SIZES:
            r = run_size(n, url, token, cluster, peer, idle_rss, cookie)
            refused = sum(r["refused"].values())
            print(f"{n:>6}{r['post_s']:9.2f}{refused:9d}{r['after_last_s']:11.2f}{r['p50']:7.2f}{r['p99']:7.2f}"
                  f"{r['conn']:8d}{r['rss_mb']:8.0f}{r['per_turn_mb']:8.3f}{'yes' if r['exactly_once'] else 'NO':>6}"
                  f"{r['load']:6.2f}→{r['load_end']:.2f}", flush=True)
            if r["ws_p50"] is not None:
                print(f"        websocket deltas on {min(WATCHERS, n)} sessions of the load: "
                      f"p50 {r['ws_p50']:.1f} ms, p99 {r['ws_p99']:.1f} ms behind the peer")
            if refused or not r["exactly_once"]:
                print(f"        refused by status: {r['refused']}; {r['detail']}")
        print(f"\nphysics: 2 model calls x {LATENCY:.1f} s = {2 * LATENCY:.1f} s per turn; 'after last' is from the last "
              "accepted POST to the last completion")
    finally:
        clusters.stop_all()
        web.terminate()
        try:
            web.wait(timeout=10)
        except subprocess.TimeoutExpired:
            web.kill()
        peer.server.shutdown()


if __name__ == "__main__":
    main()
