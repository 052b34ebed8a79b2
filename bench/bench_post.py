#!/usr/bin/env python
"""CPU per ``POST …/turns`` request, alone: a bearer-token client starting turns with
``?wait=false`` (the burst path: the 202 at once), through Django's whole handler and the
site's middleware, in this process, on a fresh SQLite file (or DATABASE_URL's PostgreSQL).

    .venv/bin/python bench/bench_post.py                    # this tree
    .venv/bin/python bench/bench_post.py --compare ../main  # this tree and another, alternating

Per round: ``BENCH_POSTS`` requests (default 300, after 50 of warm-up) round robin over 20
sessions; the round's process CPU time (all threads) / requests. Printed: the median and the
best round, and the CPU of the body's parse alone (the view's input check: µs per body, the
best of 5). ``--compare``: rounds of the two trees alternate, each in a process of its own (A B
A B …), so both see the same machine; the ratio of their medians is the figure to quote.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(os.environ.get("BENCH_ROOT") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(ROOT))

POSTS = int(os.environ.get("BENCH_POSTS", "300"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
WARMUP = 50
SESSIONS = 20


def _measure() -> dict[str, float]:
    """One process: set up, warm up, then ``ROUNDS`` rounds of ``POSTS`` requests."""
    from bench.common import fresh_database, use_database

    os.environ["JUNE_Q_SYNC"] = "0"
    name = os.environ.get("BENCH_POST_DB", "june_bench_post")  # one of its own beside another's run
    use_database(name)
    fresh_database(name)
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    from sessions_app import models as m

    setup_test_environment()  # the test Client's hooks; ALLOWED_HOSTS gains testserver
    user = get_user_model().objects.create_user("bench")
    token = m.ApiToken.issue(user, name="bench")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = json.dumps({"text": "order blue mugs"})

    def post(i: int) -> None:
        r = client.post(f"/api/agents/ops/sessions/b{i % SESSIONS}/turns?wait=false", body, "application/json")
        assert r.status_code == 202, r.content

    for i in range(WARMUP):
        post(i)
    rounds = []
    for _ in range(ROUNDS):
        start = time.process_time()
        for i in range(POSTS):
            post(i)
        rounds.append((time.process_time() - start) * 1000 / POSTS)
    return {"median_ms": statistics.median(rounds), "best_ms": min(rounds), "parse_us": _parse_us(body)}


def _parse_us(body: str) -> float:
    """µs to check one start's body (the view's input check, as the tree has it)."""
    from django.test import RequestFactory

    factory = RequestFactory()
    try:  # a tree with declared shapes
        from sessions_app.web.inputs import read_body
        from sessions_app.web.shapes_turns import StartTurn

        def check(request):
            return read_body(request, StartTurn)
    except ImportError:  # a tree that reads bodies by hand
        from sessions_app.web.api import read_json  # type: ignore[attr-defined]

        def check(request):
            return read_json(request, allowed={"text", "replace", "attachments"})

    best = float("inf")
    for _ in range(5):
        requests = [factory.post("/", body, "application/json") for _ in range(2000)]
        start = time.process_time()
        for request in requests:
            check(request)
        best = min(best, (time.process_time() - start) * 1e6 / len(requests))
    return best


def _child(root: Path) -> dict[str, float]:
    env = {**os.environ, "BENCH_ROOT": str(root), "BENCH_ROUNDS": "1"}
    out = subprocess.run(
        [sys.executable, __file__, "run"], cwd=root, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        print(json.dumps(_measure()))
        return
    trees = [ROOT]
    if sys.argv[1:2] == ["--compare"]:
        trees.append(Path(sys.argv[2]).resolve())
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at start")
    seen: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(ROUNDS):
        for tree in trees:
            seen[tree].append(_child(tree))
    for tree in trees:
        cpu = [r["median_ms"] for r in seen[tree]]
        parse = min(r["parse_us"] for r in seen[tree])
        print(
            f"{tree}: CPU per POST median {statistics.median(cpu):.3f} ms, best {min(cpu):.3f} ms "
            f"({ROUNDS} rounds of {POSTS}); body check {parse:.2f} µs"
        )
    if len(trees) == 2:
        a, b = (statistics.median(r["median_ms"] for r in seen[t]) for t in trees)
        print(f"ratio {trees[0].name} / {trees[1].name}: {a / b:.3f}")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at end")


if __name__ == "__main__":
    main()
