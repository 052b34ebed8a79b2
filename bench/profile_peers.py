#!/usr/bin/env python
"""Where June's CPU per turn goes, by process, on bench_peers' workload (one burst of N turns:
model call -> a tool that inserts a row -> model call, against the local Messages API peer):

    .venv/bin/python bench/profile_peers.py --n 1000
    .venv/bin/python bench/profile_peers.py --n 1000 --py-spy var/spy     # also sample the stacks

Starts June as ``bench_peers`` does (daphne + one ``june_worker`` cluster of 2 workers,
PostgreSQL, Redis when REDIS_URL is set), warms it with 10 turns, then sends the burst and
prints, per turn, the CPU (user + system, from /proc: far steadier on a shared machine than
any wall time) of each process by its role — daphne, the cluster's main process (django-q2's
sentinel, pusher and monitor), each worker, and any other process under it — and of the
PostgreSQL backends by who opened them (``application_name``: the web process, the workers,
django-q2's queue listener). With ``--py-spy DIR`` each of daphne and the workers is sampled
by ``py-spy record`` (100 Hz, ``--gil``: the thread holding the GIL, which is where the
process's Python CPU goes; ``--nonblocking``) for the burst, and the collapsed stacks are written to ``DIR/<role>.txt`` with a summary of the hottest frames
(``bench/spy_top.py`` reads them again).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_concurrency import PeerProcess, cpu, group_pids, load3  # noqa: E402
from bench.bench_peers import ORDERS_DB, WARM, burst, wait_done  # noqa: E402
from bench.peers.systems import ORDERS, SYSTEMS, fresh_db, query  # noqa: E402


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--latency", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--py-spy", default="", help="a folder for py-spy's collapsed stacks")
    p.add_argument(
        "--log-statements",
        default="",
        help="PostgreSQL's log file (readable here): count the burst's statements and new connections "
        "from it, by who opened them (log_statement and log_connections on for the bench's database; "
        "the logging costs the backends CPU: not for the CPU figure)",
    )
    return p.parse_args()


def roles(system: Any) -> dict[str, list[int]]:
    """The system's processes by role: daphne is the first group's leader, the cluster's main
    process the second's (django-q2's sentinel, its pusher and monitor threads); the workers
    are the processes under it that run turns (the ones with a runner thread), the rest are
    helpers (none, unless a tool started one)."""
    web, cluster = system.pgids()
    groups = group_pids(web, cluster)
    out: dict[str, list[int]] = {"daphne": groups[web], "main": [cluster]}
    kids = sorted(p for p in groups[cluster] if p != cluster)
    workers = [p for p in kids if _threads(p) > 3]
    for i, pid in enumerate(workers):
        out[f"worker{i + 1}"] = [pid]
    out["q2 helpers"] = [p for p in kids if p not in workers]
    return out


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def backends(db: str) -> dict[int, str]:
    rows = query(
        "postgres",
        "SELECT pid, application_name FROM pg_stat_activity WHERE datname = %s AND application_name <> 'bench-self'",
        (db,),
    )
    return {pid: name or "?" for pid, name in rows}


def main() -> None:
    args = arguments()
    os.environ.setdefault("REDIS_URL", "")
    from bench.common import fresh_database, use_database

    use_database(SYSTEMS["june"].databases[0], postgres_by_default=True)
    fresh_database(SYSTEMS["june"].databases[0])
    if args.log_statements:
        query("postgres", f"ALTER DATABASE {SYSTEMS['june'].databases[0]} SET log_statement = 'all'")
    fresh_db(ORDERS_DB)
    query(ORDERS_DB, ORDERS)
    peer = PeerProcess(args.latency)
    system = SYSTEMS["june"](peer.url, ORDERS_DB)
    spies: list[subprocess.Popen] = []
    try:
        url = system.start()
        tag = time.strftime("%H%M%S")
        warm = f"w{tag}-"
        burst(
            url, [(f"{warm}{i}", *system.request(f"{warm}{i}", f"order mugs [bench:{warm}{i}]")) for i in range(WARM)]
        )
        wait_done(system, warm, WARM, args.timeout)
        time.sleep(2)
        by_role = roles(system)
        db = system.databases[0]
        pg0 = {pid: (name, cpu([pid])) for pid, name in backends(db).items()}
        c0 = {role: cpu(pids) for role, pids in by_role.items()}
        if args.py_spy:
            spies = _spy(Path(args.py_spy), by_role)
        load_start = load3()
        log_at = Path(args.log_statements).stat().st_size if args.log_statements else 0
        prefix = f"b{tag}-"
        keys = [f"{prefix}{i}" for i in range(args.n)]
        t0 = time.monotonic()
        res = burst(url, [(k, *system.request(k, f"order mugs [bench:{k}]")) for k in keys])
        posts = max(res["answered"].values()) - res["t0"]
        accepted = [k for k in keys if 200 <= res["status"][k] < 300]
        mid_names = backends(db)
        pg_mid = {pid: cpu([pid]) for pid in mid_names}
        wait_done(system, prefix, len(accepted), args.timeout)
        wall = time.monotonic() - t0
        log_end = Path(args.log_statements).stat().st_size if args.log_statements else 0
        used = {role: cpu(pids) - c0[role] for role, pids in by_role.items()}
        pg_end = backends(db)
        pg: dict[str, float] = {}
        for pid, name in pg_end.items():
            first = pg0.get(pid, (name, 0.0))[1]
            if pid not in pg0:  # opened during the burst: its start and first plans are in it
                name = f"{name} (new: {sum(1 for p, n in pg_end.items() if n == name and p not in pg0)})"
            pg[name] = pg.get(name, 0.0) + cpu([pid]) - first
        for pid in set(pg_mid) - set(pg_end):  # a backend that ended before the end (its last reading)
            pg["(ended)"] = pg.get("(ended)", 0.0) + pg_mid[pid] - pg0.get(pid, ("", 0.0))[1]
    finally:
        for spy in spies:
            spy.send_signal(2)
        for spy in spies:
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
        system.stop()
        peer.stop()
    n = len(accepted)
    print(f"N = {args.n}: {n} accepted, POSTs answered after {posts:.2f} s, last done after {wall:.1f} s")
    print(f"load (1/5/15 min): {load_start} -> {load3()}")
    print("| process | CPU ms per turn |\n| --- | --- |")
    total = 0.0
    for role, seconds in used.items():
        total += seconds
        print(f"| {role} ({len(by_role[role])}) | {1000 * seconds / n:.2f} |")
    for name, seconds in sorted(pg.items()):
        total += seconds
        print(f"| PostgreSQL: {name} | {1000 * seconds / n:.2f} |")
    print(f"| all | {1000 * total / n:.2f} |")
    if args.log_statements:
        _statements(Path(args.log_statements), log_at, log_end, db, {**mid_names, **pg_end}, set(pg0), n)
    if args.py_spy:
        from bench.spy_top import summary

        for role in by_role:
            path = Path(args.py_spy) / f"{role}.txt"
            if path.exists():
                print(f"\n{role}: py-spy, the hottest frames (self / total, % of samples)")
                print(summary(path))


def _statements(path: Path, start: int, end: int, db: str, names: dict[int, str], before: set[int], n: int) -> None:
    """The burst's statements in PostgreSQL's log (``--log-statements``), by the
    ``application_name`` of the backend that ran them (as the bench saw it during or after the
    burst), the backends that ran some and were not there before it (new connections), and the
    statements' most frequent shapes."""
    import collections
    import re

    with path.open("rb") as f:
        f.seek(start)
        text = f.read(end - start).decode(errors="replace")
    statements: collections.Counter[int] = collections.Counter()
    shapes: collections.Counter[str] = collections.Counter()
    connected: collections.Counter[str] = collections.Counter()
    line_re = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] (?:\S*@(\S*) )?LOG:  (.*)$")
    for line in text.splitlines():
        match = line_re.match(line)
        if not match:
            continue
        pid, msg = int(match.group(1)), match.group(3)
        if match.group(2) != db and pid not in names:
            continue
        if msg.startswith(("statement: ", "execute ")):
            statements[pid] += 1
            body = msg.split(": ", 1)[1] if ": " in msg else msg
            shapes[re.sub(r"\s+", " ", body)[:110]] += 1
    by_name: collections.Counter[str] = collections.Counter()
    for pid, count in statements.items():
        by_name[names.get(pid, "(ended)")] += count
        if pid not in before:
            connected[names.get(pid, "(ended)")] += 1
    print(f"\nstatements per turn (PostgreSQL's log): {sum(by_name.values()) / n:.2f}")
    for name, count in by_name.most_common():
        print(f"  {name}: {count / n:.2f}")
    print("new connections in the burst: " + (", ".join(f"{k} {v}" for k, v in connected.most_common()) or "none"))
    print("most frequent statements (per turn):")
    for shape, count in shapes.most_common(40):
        print(f"  {count / n:6.2f}  {shape}")


def _spy(folder: Path, by_role: dict[str, list[int]]) -> list[subprocess.Popen]:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    folder.mkdir(parents=True, exist_ok=True)
    spies = []
    for role, pids in by_role.items():
        if role == "daphne" or role.startswith("worker"):
            out = folder / f"{role}.txt"
            cmd = [
                exe,
                "record",
                "-p",
                str(pids[0]),
                "-r",
                "100",
                "--gil",
                "--nonblocking",
                "-f",
                "raw",
                "-o",
                str(out),
            ]
            spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1)
    return spies


if __name__ == "__main__":
    main()
