#!/usr/bin/env python
"""What a /readyz probe costs (docs/operations.md "Health"): a load balancer asks every second.

    .venv/bin/python bench/bench_health.py                  # SQLite (embedded default)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/x REDIS_URL=redis://127.0.0.1:6379/7 \\
        .venv/bin/python bench/bench_health.py              # PostgreSQL + Redis (database recreated)

1. In process: ``health.readiness()`` BENCH_N times on one event loop — wall time per call and
   the SQL statements each sends (counted on the checks' thread).
2. Through one daphne (``JUNE_PROCESS=web``, as deployed): BENCH_N sequential GETs of /readyz and
   of /healthz over one keep-alive connection — latency per request, and daphne's CPU time per
   request (from /proc: what the probes cost the web process).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import fresh_database, use_database  # noqa: E402

BENCH_DB = os.environ.get("BENCH_DB", "june_health_bench")
N = int(os.environ.get("BENCH_N", "1000"))
use_database(BENCH_DB)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def in_process() -> None:
    from django.db import connections

    from sessions_app import health

    statements = [0]

    def count(execute, sql, params, many, context):
        statements[0] += 1
        return execute(sql, params, many, context)

    health.probe_thread.submit(lambda: connections["default"].execute_wrappers.append(count)).result()

    async def run() -> list[float]:
        await health.readiness()  # the first: connects, computes the migration plan
        times = []
        for _ in range(N):
            started = time.perf_counter()
            report = await health.readiness()
            times.append(time.perf_counter() - started)
            assert report["status"] == "ok", report
        return times

    statements[0] = 0
    times = asyncio.run(run())
    print(
        f"readiness() in process: {statistics.mean(times) * 1e3:.3f} ms mean, p50 "
        f"{statistics.median(times) * 1e3:.3f} ms, p99 {sorted(times)[int(N * 0.99)] * 1e3:.3f} ms; "
        f"{statements[0] / N:.1f} SQL statements per call"
    )


def through_daphne() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JUNE_PROCESS": "web", "DEBUG": "0"}
    daphne = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "june_project.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/readyz")
                response = conn.getresponse()
                response.read()
                if response.status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("daphne did not answer /readyz 200")
            time.sleep(0.2)
        for path in ("/readyz", "/healthz"):
            times = []
            cpu = _cpu_seconds(daphne.pid)
            for _ in range(N):
                started = time.perf_counter()
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                times.append(time.perf_counter() - started)
                assert response.status == 200, (path, response.status)
            cpu = _cpu_seconds(daphne.pid) - cpu
            print(
                f"GET {path} through daphne: {statistics.mean(times) * 1e3:.2f} ms mean, p50 "
                f"{statistics.median(times) * 1e3:.2f} ms, p99 {sorted(times)[int(N * 0.99)] * 1e3:.2f} ms; "
                f"daphne CPU {cpu / N * 1e3:.2f} ms per request"
            )
    finally:
        daphne.terminate()
        daphne.wait(10)


def main() -> None:
    fresh_database(BENCH_DB)
    from django.conf import settings

    backend = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    print(
        f"june bench_health: {backend} + {layer}, N = {N}, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs"
    )
    in_process()
    through_daphne()


if __name__ == "__main__":
    main()
