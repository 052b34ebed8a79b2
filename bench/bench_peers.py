#!/usr/bin/env python
"""June against its peers on one workload, one machine, one client:

    .venv/bin/python bench/bench_peers.py                          # N = 10, 100, 1000; 2 rounds
    .venv/bin/python bench/bench_peers.py --n 100 --rounds 1 --systems june,langgraph
    .venv/bin/python bench/bench_peers.py --n 100 --rounds 4 --settle 1.5   # each burst at load < 1.5

A turn is: model call -> a tool that inserts a row in PostgreSQL -> model call, against the
same local Messages API peer (``bench_concurrency.Peer``: each answer streamed over
``--latency`` s, 1.0 by default; the first asks for ``create_order``, the second ends). Per N,
N turns are started at once over N new sessions by one client (a process of its own, asyncio
streams, one connection per POST, as bench_concurrency's), against:

- **june**: daphne + one ``june_worker`` cluster of 2 worker processes (PostgreSQL; Redis as
  the channel layer when REDIS_URL is set), the demo ``ops`` agent, ``POST
  …/turns?wait=false``;
- **langgraph**: LangGraph's Agent Server run locally, ``langgraph dev`` (the in-memory
  runtime: runs and checkpoints live in the server's memory, *not durable*; 1,000 jobs per
  worker), a prebuilt ReAct agent (``bench/peers/lg_agent.py``), ``POST /threads/<id>/runs``;
- **dbos**: DBOS Transact under uvicorn (FastAPI), a durable async workflow per turn whose steps
  are checkpointed in PostgreSQL (``bench/peers/dbos_app.py``), ``POST /turns/<key>``.

LangGraph and DBOS run in venvs of their own that the bench makes under var/peers/ on first use
(``peers/systems.py`` ``PACKAGES``, from PyPI). The systems run in turn, A B C A B C…, each
restarted for each run; before each burst 10 warm-up turns and 5 s idle.

Printed per N and system (the mean of the rounds), with the ratios June / LangGraph and June /
DBOS, and the load average at each run's start and end (2 cores: above 2 the machine is shared
and the figures are its, not the code's — trust the ratios of one sitting most):

- ``POSTs s``: from the burst's start until every POST was answered; ``refused``: answers other
  than 2xx;
- ``last done s``: from the burst's start until the last turn ended (the system's own end time);
- ``p50`` / ``p99``: each turn's latency, from its POST sent to its end (the system's record);
- ``CPU ms/turn``: the CPU the system's processes (every process of their process groups) and
  its PostgreSQL backends (those connected to its databases, sampled every 0.5 s: a backend that
  came and went between samples is missed) used from the burst until its last turn ended, per
  turn (the bench waits on the peer's count of finished answers first and asks the system
  whether its turns ended only after the last one: its asking would be counted as the
  system's CPU); ``idle CPU``: CPU-s per s in 5 s idle before the burst;
- ``PSS MB``: the peak proportional set size of the system's processes (PostgreSQL not counted),
  RSS beside it; ``idle PSS``; ``procs``: how many processes;
- ``once``: every turn ended successfully on its first attempt, 2 model calls each at the peer,
  one order row each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_concurrency import PeerProcess, cpu, group_pids, http_post, load3, pct, pss_of  # noqa: E402
from bench.peers.systems import DB_PREFIX, ORDERS, SYSTEMS, fresh_db, query, redis_pid  # noqa: E402

ORDERS_DB = f"{DB_PREFIX}_orders"
WARM = 10


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", default=os.environ.get("BENCH_N", "10,100,1000"))
    p.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "2")))
    p.add_argument("--systems", default="june,langgraph,dbos")
    p.add_argument("--latency", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", default="")
    p.add_argument(
        "--settle",
        type=float,
        default=float(os.environ.get("BENCH_SETTLE", "0")),
        help="before each burst (after the warm-up), wait until the 1-minute load average is below this "
        "(at most 3 minutes; 0: no wait)",
    )
    return p.parse_args()


# -- the client --------------------------------------------------------------------------------------


async def _burst(url: str, requests: list[tuple[str, str, dict[str, str], bytes]]) -> dict[str, Any]:
    from urllib.parse import urlsplit

    where = urlsplit(url)
    sent: dict[str, float] = {}
    status: dict[str, int] = {}
    answered: dict[str, float] = {}

    async def one(key: str, path: str, headers: dict[str, str], body: bytes) -> None:
        sent[key] = time.time()
        try:
            status[key] = (await http_post(where.hostname, where.port, path, headers, body))[0]
        except (OSError, ValueError, IndexError):
            status[key] = 0
        answered[key] = time.time()

    t0 = time.time()
    await asyncio.gather(*(one(*r) for r in requests))
    return {"t0": t0, "sent": sent, "status": status, "answered": answered, "cpu_s": time.process_time()}


def _client(url: str, requests: list, out) -> None:
    out.put(asyncio.run(_burst(url, requests)))


def burst(url: str, requests: list) -> dict[str, Any]:
    """Every request at once, from a process of its own."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_client, args=(url, requests, out), daemon=True)
    proc.start()
    result = out.get(timeout=1800)
    proc.join(30)
    return result


# -- what the system holds and spends ------------------------------------------------------------------


class Meter(threading.Thread):
    """Every 0.5 s: the system's processes' PSS and RSS (peaks), and its PostgreSQL backends'
    CPU: each backend's last reading, less its reading when the meter began, or all of it for a
    backend opened since (its start and its first plans, spent before a sample could see it,
    are the system's too). With ``redis``, the Redis server's CPU from the meter's start (the
    channel layer's work: nothing else may use that server while a bench runs)."""

    def __init__(self, system: Any, redis: str = "") -> None:
        super().__init__(daemon=True)
        self.system = system
        self.peak_pss = self.peak_rss = 0
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.stop = threading.Event()
        self.began = False
        self.sample()
        self.began = True
        self.redis_pid = redis_pid(redis) if redis else 0
        self.redis_first = cpu([self.redis_pid]) if self.redis_pid else 0.0
        self.redis_last = self.redis_first

    def pids(self) -> list[int]:
        groups = group_pids(*self.system.pgids())
        return [pid for pids in groups.values() for pid in pids]

    def sample(self) -> None:
        pids = self.pids()
        self.peak_pss = max(self.peak_pss, sum(pss_of(p) for p in pids))
        self.peak_rss = max(self.peak_rss, sum(_rss(p) for p in pids))
        if self.system.databases:
            rows = query(
                "postgres",
                "SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s) AND application_name <> 'bench-self'",
                (list(self.system.databases),),
            )
            for (pid,) in rows:
                used = cpu([pid])
                self.first.setdefault(pid, 0.0 if self.began else used)
                self.last[pid] = used

    def pg_cpu(self) -> float:
        return sum(self.last[p] - self.first[p] for p in self.last)

    def redis_cpu(self) -> float:
        return self.redis_last - self.redis_first

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.sample()

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.sample()
        if self.redis_pid:
            self.redis_last = cpu([self.redis_pid])


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _title(pid: int) -> str:
    """A process's command line, short: what the idle memory is listed by."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[-60:]
    except OSError:
        return "?"


def finished(peer: PeerProcess) -> int:
    """How many second answers (the ones that end a turn) the peer has streamed to their end."""
    import httpx

    return httpx.get(peer.url + "/_counts", timeout=60).json()["finished"]


def wait_peer(peer: Any, answers: int, timeout: float, count: Any = finished) -> None:
    """Until the peer has streamed ``answers`` second answers to their end (or its count stops
    moving for 10 s: a turn that failed asks no more): asking the peer costs the system nothing,
    while asking the system costs it CPU in the measured window (LangGraph's count is two HTTP
    requests to its server; June's a query of the bench's own), so the system is asked only
    for the last few milliseconds of its turns."""
    deadline = time.monotonic() + timeout
    seen, moved = -1, time.monotonic()
    while (now := count(peer)) < answers and time.monotonic() < deadline:
        if now != seen:
            seen, moved = now, time.monotonic()
        elif time.monotonic() - moved > 10:
            return
        time.sleep(0.1)  # polling the peer's count


def wait_done(system: Any, prefix: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while system.done(prefix) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"{system.name}: {system.done(prefix)} of {count} turns ended after {timeout} s")
        time.sleep(0.2)  # polling the system's record of ended turns


def settle(below: float, limit: float = 180.0) -> None:
    """Until the 1-minute load average is under ``below``, or ``limit`` seconds have passed (the
    run's load at its start is printed either way)."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] >= below and time.monotonic() < deadline:
        time.sleep(1)  # polling the load average


# -- one run -------------------------------------------------------------------------------------------


def run_one(name: str, n: int, tag: str, args: argparse.Namespace) -> dict[str, Any]:
    peer = PeerProcess(args.latency)
    query(ORDERS_DB, "TRUNCATE bench_orders")
    system = SYSTEMS[name](peer.url, ORDERS_DB)
    try:
        url = system.start()
        warm = f"w{tag}-"
        res = burst(
            url, [(f"{warm}{i}", *system.request(f"{warm}{i}", f"order mugs [bench:{warm}{i}]")) for i in range(WARM)]
        )
        wait_done(system, warm, WARM, args.timeout)
        if args.settle:
            settle(args.settle)
        meter = Meter(system)
        time.sleep(1)
        pids = meter.pids()
        c0 = cpu(pids)
        time.sleep(5)
        idle_cpu = (cpu(meter.pids()) - c0) / 5
        idle_pss = sum(pss_of(p) for p in meter.pids())
        idle_by = sorted((round(pss_of(p) / 2**20), _title(p)) for p in meter.pids())
        meter = Meter(system, redis=os.environ["REDIS_URL"] if system.uses_redis else "")  # from here
        meter.start()
        load_start = load3()
        prefix = f"b{tag}-"
        keys = [f"{prefix}{i}" for i in range(n)]
        ended = finished(peer)
        c0 = cpu(meter.pids())
        res = burst(url, [(k, *system.request(k, f"order mugs [bench:{k}]")) for k in keys])
        accepted = [k for k in keys if 200 <= res["status"][k] < 300]
        wait_peer(peer, ended + len(accepted), args.timeout)
        wait_done(system, prefix, len(accepted), args.timeout)
        used = cpu(meter.pids()) - c0
        meter.finish()
        load_end = load3()
        ended = system.ended(prefix, accepted)
        _, calls = peer.counts()
        orders = system.orders(accepted)
        once = (
            len(ended) == len(accepted)
            and all(ok for _, ok in ended.values())
            and all(calls.get(k) == [1, 1] for k in accepted)
            and all(orders.get(k) == 1 for k in accepted)
        )
        latencies = [ended[k][0] - res["sent"][k] for k in accepted if k in ended]
        return {
            "system": name,
            "n": n,
            "posts_s": max(res["answered"].values()) - res["t0"],
            "refused": n - len(accepted),
            "last_done_s": max(at for at, _ in ended.values()) - res["t0"] if ended else float("nan"),
            "p50": pct(latencies, 50),
            "p99": pct(latencies, 99),
            "cpu_ms": 1000 * (used + meter.pg_cpu() + meter.redis_cpu()) / n,
            "cpu_ms_processes": 1000 * used / n,
            "cpu_ms_postgres": 1000 * meter.pg_cpu() / n,
            "cpu_ms_redis": 1000 * meter.redis_cpu() / n,
            "idle_cpu": idle_cpu,
            "pss_mb": meter.peak_pss / 2**20,
            "rss_mb": meter.peak_rss / 2**20,
            "idle_pss_mb": idle_pss / 2**20,
            "procs": len(pids),
            "idle_pss_by_process": idle_by,
            "once": once,
            "load": f"{load_start} -> {load_end}",
        }
    finally:
        system.stop()
        peer.stop()


# -- the table -----------------------------------------------------------------------------------------

ROWS = [
    ("all POSTs answered after (s)", "posts_s", "{:.2f}"),
    ("refused", "refused", "{:.0f}"),
    ("burst start -> last turn done (s)", "last_done_s", "{:.2f}"),
    ("turn latency p50 (s)", "p50", "{:.2f}"),
    ("turn latency p99 (s)", "p99", "{:.2f}"),
    ("CPU per turn, processes + PostgreSQL + Redis (ms)", "cpu_ms", "{:.1f}"),
    ("  of which PostgreSQL backends (ms)", "cpu_ms_postgres", "{:.1f}"),
    ("  of which the Redis server (ms)", "cpu_ms_redis", "{:.1f}"),
    ("peak PSS (MB)", "pss_mb", "{:.0f}"),
    ("peak RSS (MB)", "rss_mb", "{:.0f}"),
    ("idle PSS (MB)", "idle_pss_mb", "{:.0f}"),
    ("idle CPU (CPU-s per s)", "idle_cpu", "{:.3f}"),
    ("processes", "procs", "{:.0f}"),
]


def mean(runs: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs)


def table(n: int, runs: list[dict[str, Any]], names: list[str]) -> None:
    by = {s: [r for r in runs if r["system"] == s and r["n"] == n] for s in names}
    others = [s for s in names if s != "june" and by[s]]
    head = ["", *names, *(f"june / {s}" for s in others if "june" in names)]
    print(f"\nN = {n:,} (mean of {len(by[names[0]])} run(s))")
    print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
    for label, key, fmt in ROWS:
        cells = [fmt.format(mean(by[s], key)) if by[s] else "-" for s in names]
        if "june" in names and by["june"]:
            cells += [f"{mean(by['june'], key) / mean(by[s], key):.2f}x" if mean(by[s], key) else "-" for s in others]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(
        "| exactly once | "
        + " | ".join("yes" if by[s] and all(r["once"] for r in by[s]) else "NO" for s in names)
        + " |"
    )
    for s in names:
        print(f"  {s}: load (1/5/15 min) per run: " + "; ".join(r["load"] for r in by[s]))
        print(f"  {s}: CPU per turn by run (ms): " + ", ".join(f"{r['cpu_ms']:.1f}" for r in by[s]))
        if by[s]:
            print(
                f"  {s}: idle PSS by process (MB): "
                + ", ".join(f"{mb} {t}" for mb, t in by[s][0]["idle_pss_by_process"])
            )


def main() -> None:
    args = arguments()
    ns = [int(x) for x in args.n.split(",")]
    names = args.systems.split(",")
    os.environ.setdefault("REDIS_URL", "")
    from bench.common import fresh_database, use_database

    use_database(SYSTEMS["june"].databases[0], postgres_by_default=True)
    fresh_database(SYSTEMS["june"].databases[0])
    fresh_db(ORDERS_DB)
    query(ORDERS_DB, ORDERS)
    runs: list[dict[str, Any]] = []
    stamp = time.strftime("%H%M%S")
    for n in ns:
        for r in range(args.rounds):
            for name in names:  # A B C A B C
                result = run_one(name, n, f"{stamp}n{n}r{r}", args)
                print(json.dumps(result), flush=True)
                runs.append(result)
        table(n, runs, names)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
