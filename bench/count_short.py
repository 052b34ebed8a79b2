#!/usr/bin/env python
"""Instructions per short turn, counted (not timed): bench_short.py's workload (create + drive a
1-tool-call turn, 3 steps) for ``N`` turns, under valgrind's callgrind, all threads.

    bench/count_short.py            # runs N=20 and N=70 under callgrind, prints (I70 - I20) / 50

A machine whose speed drifts 2-3x over minutes cannot tell two trees apart by time; the
instruction count of the same work does not move with it. Both runs do the same start-up
(Django, a migrated SQLite file, 5 warm-up turns), so the difference is the turns alone.
``COUNT_HISTORY`` messages of history first (default 40, made by turns in the same session).
``COUNT_STORE=memory``: the in-memory store (the engine's own count, the floor under a store's).
``BENCH_TOOL=async``: an async tool (bench_short's knob): no unit hops threads.

    bench/count_short.py run N      # (what callgrind runs) the workload alone, N turns
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOW, HIGH = int(os.environ.get("COUNT_LOW", "20")), int(os.environ.get("COUNT_HIGH", "70"))
HISTORY = int(os.environ.get("COUNT_HISTORY", "40"))


def workload(n: int) -> None:
    import shutil

    from bench.common import fresh_database, use_database

    use_database("june_count_short")
    template = os.environ.get("COUNT_TEMPLATE")
    if template:  # a migrated file: a migration under callgrind takes minutes, and is not the turns
        shutil.copy(template, Path(os.environ["JUNE_VAR_DIR"]) / "june.sqlite3")
        import django

        django.setup()
    else:
        fresh_database("june_count_short")
    from bench.bench_short import make_agent, one_turn
    from sessions_app.store import DjangoSessionStore

    store, agent = DjangoSessionStore(), make_agent()
    if os.environ.get("COUNT_STORE") == "memory":  # the engine alone, on the in-memory store
        from agents_app.runtime import InMemorySessionStore

        store = InMemorySessionStore()

    async def turns() -> None:
        for i in range(5 + HISTORY // 4):
            await one_turn(store, agent, "grows", i)
        for i in range(n):
            await one_turn(store, agent, "grows", 1000 + i)

    asyncio.run(turns())


def template() -> str:
    """A migrated SQLite file the runs start from (a copy each)."""
    var = tempfile.mkdtemp(prefix="count-short-template-")
    env = {**os.environ, "JUNE_VAR_DIR": var}
    env.pop("DATABASE_URL", None)
    subprocess.run(
        [sys.executable, "-c", "from bench.common import fresh_database; fresh_database('june_count_short')"],
        env=env,
        cwd=ROOT,
        check=True,
    )
    return str(Path(var) / "june.sqlite3")


def count(n: int, template: str) -> tuple[dict[int, int], Path]:
    """Instructions by thread (1: the main thread), and the folder of callgrind's files."""
    folder = Path(tempfile.mkdtemp(prefix="count-short-"))
    env = {**os.environ, "PYTHONHASHSEED": "0", "COUNT_TEMPLATE": template}
    env.pop("DATABASE_URL", None)
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={folder / 'callgrind.out'}",
            sys.executable,
            __file__,
            "run",
            str(n),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    threads = {}
    for path in folder.glob("callgrind.out-*"):
        text = path.read_text(errors="replace")
        thread = int(re.search(r"^thread:\s+(\d+)", text, re.M).group(1))
        threads[thread] = int(re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M).group(1))
    return threads, folder


def _checkpointing(folder: Path) -> set[int]:
    """The threads that ran the WAL's checkpoints (``lite_wal.checkpoints``' thread): they
    checkpoint and insert nothing (asgiref's thread runs the sync tool's unit)."""
    found = set()
    for path in folder.glob("callgrind.out-*"):
        text = path.read_text(errors="replace")
        thread = int(re.search(r"^thread:\s+(\d+)", text, re.M).group(1))
        if thread != 1 and "sqlite3WalCheckpoint" in text and "sqlite3BtreeInsert" not in text:
            found.add(thread)
    return found


def main() -> None:
    if sys.argv[1:2] == ["run"]:
        os.environ.setdefault("JUNE_LEASE_SECONDS", "60")
        workload(int(sys.argv[2]))
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
    os.environ.setdefault("SECRET_KEY", "june_count_short")
    migrated = template()
    (low, low_out), (high, high_out) = count(LOW, migrated), count(HIGH, migrated)
    turns = HIGH - LOW
    total = (sum(high.values()) - sum(low.values())) / turns
    background = _checkpointing(high_out) | _checkpointing(low_out)
    walled = (
        sum(v for t, v in high.items() if t in background) - sum(v for t, v in low.items() if t in background)
    ) / turns
    print(
        f"per turn: {total / 1e6:.3f} M instructions, all threads; {(total - walled) / 1e6:.3f} M without the "
        f"checkpoints' thread ({walled / 1e6:.3f} M: when it runs depends on the threads' timing)"
    )
    for thread in sorted(high):
        print(
            f"  thread {thread}{' (checkpoints)' if thread in background else ''}: "
            f"{(high[thread] - low.get(thread, 0)) / turns / 1e6:.3f} M per turn"
        )
    print(
        f"callgrind files (callgrind_annotate; bench/count_diff.py for the difference by function): "
        f"{low_out} {high_out}"
    )


if __name__ == "__main__":
    main()
