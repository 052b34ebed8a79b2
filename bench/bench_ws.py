#!/usr/bin/env python
"""Websocket figures, measured end to end through real processes (PostgreSQL + Redis):

1. delta-to-client latency: a model delta emitted in a q2 worker (its wall-clock time is the
   delta's text) → received by a websocket client, through the sink, Redis and daphne;
2. events per second one websocket session sustains (layer → daphne → client; the publisher keeps
   at most ``--window`` messages in flight so nothing is dropped for capacity);
3. concurrent clients one daphne process holds, each receiving a streaming turn: every committed
   event exactly once and in order, and the text rebuilt from the deltas equal to the final text.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/june_bench REDIS_URL=redis://127.0.0.1:6379/9 \\
        .venv/bin/python bench/bench_ws.py [--clients 200] [--deltas 40] [--pace 0.025]

It creates that database when it is missing, migrates it, starts one daphne and one qcluster
(``--workers`` processes), and prints the figures. A bench agent (a model that streams
timestamps) lives in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_AGENT = '''
import asyncio, time
from agents_app.providers import register
from agents_app.runtime.model import ModelReply, StopReason, TextDelta

model = "bench"


class BenchModel:
    """Streams ``bench <n> <pace>``: n deltas, each its own emission time, ``pace`` s apart."""

    async def stream(self, request):
        _, n, pace = request.messages[-1].text.split()
        pieces = []
        for _ in range(int(n)):
            if float(pace):
                await asyncio.sleep(float(pace))
            piece = f"{time.time():.6f} "
            pieces.append(piece)
            yield TextDelta(piece)
        yield ModelReply(text="".join(pieces), tool_calls=(), stop_reason=StopReason.END_TURN, usage={})


register("bench", lambda agent: BenchModel())
'''


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Client:
    """One websocket on one session; rebuilds delta text and checks committed events."""

    def __init__(self, ws, latencies: list[float]):
        self.ws, self.latencies = ws, latencies
        self.seqs: list[int] = []
        self.text, self.base, self.final = "", None, None

    async def until_turn_ends(self, timeout: float) -> None:
        while True:
            frame = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
            now = time.time()
            kind = frame.get("type")
            if "seq" in frame:
                self.seqs.append(frame["seq"])
            if kind == "message.delta":
                if frame["base"] != self.base:
                    self.text, self.base = "", frame["base"]
                if frame["offset"] <= len(self.text):
                    rebuilt = self.text[: frame["offset"]] + frame["text"]
                    fresh = rebuilt[len(self.text) :]
                    self.text = max(rebuilt, self.text, key=len)
                    self.latencies.extend(now - float(t) for t in re.findall(r"\d+\.\d+", fresh))
            elif kind == "message.completed":
                self.final = frame["text"]
            elif kind in ("turn.completed", "turn.failed", "turn.cancelled"):
                return
            elif kind == "error":
                raise RuntimeError(frame)


async def connect(url: str, cookie: str, key: str):
    import websockets

    ws = await websockets.connect(
        f"{url.replace('http', 'ws')}/ws/agents/bench/sessions/{key}/?after=0",
        origin=url,
        additional_headers={"Cookie": cookie},
        max_queue=None,
        open_timeout=120,
    )
    while json.loads(await asyncio.wait_for(ws.recv(), 120)).get("type") != "ready":
        pass
    return ws


async def latency(url: str, cookie: str, deltas: int, pace: float) -> None:
    lat: list[float] = []
    ws = await connect(url, cookie, "latency")
    await ws.send(json.dumps({"type": "start", "text": f"bench {deltas} {pace}"}))
    client = Client(ws, lat)
    await client.until_turn_ends(120)
    await ws.close()
    ms = [x * 1000 for x in lat]
    print(
        f"delta → client latency, one session, {deltas} deltas every {pace * 1000:.0f} ms: "
        f"p50 {percentile(ms, 50):.2f} ms, p99 {percentile(ms, 99):.2f} ms, max {max(ms):.2f} ms (n={len(ms)})"
    )


async def throughput(url: str, cookie: str, messages: int, window: int) -> None:
    from channels.layers import get_channel_layer

    from agents_app.runtime.seams import SessionRef
    from sessions_app.outbox.sink import group_name

    ws = await connect(url, cookie, "throughput")
    layer, group = get_channel_layer(), group_name(SessionRef("bench", "throughput"))
    received = 0

    async def reader():
        nonlocal received
        while received < messages:
            await asyncio.wait_for(ws.recv(), 60)
            received += 1

    task = asyncio.ensure_future(reader())
    start = time.perf_counter()
    for i in range(messages):
        while i - received >= window:
            await asyncio.sleep(0.0005)
        await layer.group_send(
            group,
            {
                "type": "june.delta",
                "event": {"type": "message.delta", "turn_id": "t", "text": "x" * 20, "offset": i * 20, "base": 0},
            },
        )
    await task
    elapsed = time.perf_counter() - start
    await ws.close()
    print(
        f"one websocket session: {messages / elapsed:,.0f} messages/s sustained "
        f"({messages} layer messages, ≤{window} in flight, {received} received)"
    )


async def concurrent(url: str, cookie: str, clients: int, deltas: int, pace: float) -> None:
    lat: list[float] = []
    sockets = []
    for start in range(0, clients, 10):  # connect in waves: the handshake is the costly part
        sockets += await asyncio.gather(
            *(connect(url, cookie, f"c{i}") for i in range(start, min(clients, start + 10)))
        )
    t0 = time.perf_counter()
    await asyncio.gather(*(ws.send(json.dumps({"type": "start", "text": f"bench {deltas} {pace}"})) for ws in sockets))
    bench = [Client(ws, lat) for ws in sockets]
    results = await asyncio.gather(*(c.until_turn_ends(600) for c in bench), return_exceptions=True)
    elapsed = time.perf_counter() - t0
    failed = [r for r in results if isinstance(r, Exception)]
    dup_or_gap = sum(1 for c in bench if c.seqs != list(range(c.seqs[0], c.seqs[0] + len(c.seqs))) if c.seqs)
    text_mismatch = sum(1 for c in bench if c.final is None or c.text != c.final)
    for c in bench:
        if c.final is not None and c.text != c.final:
            print(
                f"  text mismatch example: rebuilt {len(c.text)} chars vs final {len(c.final)} "
                f"(rebuilt is a prefix: {c.final.startswith(c.text)})"
            )
            break
    events = sum(len(c.seqs) for c in bench)
    await asyncio.gather(*(ws.close() for ws in sockets))
    ms = [x * 1000 for x in lat]
    print(
        f"{clients} concurrent websocket clients on one daphne, each a streaming turn of {deltas} deltas: "
        f"{clients - len(failed)} finished in {elapsed:.1f} s; committed events {events}, "
        f"sessions with a lost/duplicated/out-of-order event: {dup_or_gap}; "
        f"delta text ≠ final text: {text_mismatch}; failures: {len(failed)} {failed[:2]}"
    )
    if ms:
        print(
            f"  delta → client latency under that load: p50 {percentile(ms, 50):.2f} ms, "
            f"p99 {percentile(ms, 99):.2f} ms (n={len(ms)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--deltas", type=int, default=40)
    parser.add_argument("--pace", type=float, default=0.025, help="seconds between model deltas")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--only", choices=["latency", "throughput", "concurrent"], default=None)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        sys.exit("bench_ws needs DATABASE_URL (PostgreSQL) and REDIS_URL")

    agents = Path(tempfile.mkdtemp(prefix="june-bench-agents-"))
    (agents / "bench").mkdir()
    (agents / "bench" / "agent.py").write_text(BENCH_AGENT)
    (agents / "bench" / "instructions.md").write_text("A bench agent.\n")
    os.environ.update(
        {
            "JUNE_AGENT_DIRS": str(agents),
            "JUNE_Q_WORKERS": str(args.workers),
            "SECRET_KEY": os.environ.get("SECRET_KEY", "june-bench-secret"),
            "DEBUG": "0",
            "DJANGO_SETTINGS_MODULE": "june_project.settings",
            "JUNE_Q_QUEUE_LIMIT": str(args.workers * 4),
            "JUNE_RATE_LIMITS": os.environ.get("JUNE_RATE_LIMITS", "0"),
            # every client is the one bench user: room for all of them and the other parts' own
            "JUNE_WS_MAX_PER_USER": os.environ.get("JUNE_WS_MAX_PER_USER", str(args.clients + 10)),
        }
    )
    from bench.common import ensure_database

    ensure_database()
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client as DjangoClient

    call_command("migrate", verbosity=0)
    from sessions_app import models as m

    m.Session.objects.filter(agent="bench").delete()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    web = DjangoClient()
    web.force_login(user)
    cookie = f"sessionid={web.cookies['sessionid'].value}"

    port = args.port or _free_port()
    url = f"http://127.0.0.1:{port}"
    logs = Path(tempfile.mkdtemp(prefix="june-bench-logs-"))
    print(f"server output: {logs}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(logs / "daphne.log", "w"),
        ),
        subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(logs / "qcluster.log", "w"),
        ),
    ]
    try:
        _wait(url)
        print(
            f"june bench_ws: PostgreSQL + Redis, 1 daphne, 1 qcluster × {args.workers} workers, {os.cpu_count()} CPUs"
        )
        if args.only in (None, "latency"):
            asyncio.run(latency(url, cookie, 200, args.pace))
        if args.only in (None, "throughput"):
            asyncio.run(throughput(url, cookie, args.messages, args.window))
        if args.only in (None, "concurrent"):
            asyncio.run(concurrent(url, cookie, args.clients, args.deltas, args.pace))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str) -> None:
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/accounts/login/", timeout=5).read()
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("daphne did not start")


if __name__ == "__main__":
    main()
