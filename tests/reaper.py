"""Worker clusters and servers a test starts run in process groups of their own (so a test can
SIGKILL a whole cluster), which also means they outlive a test run that is itself killed: a
CI timeout, a SIGKILL, a closed terminal. Left running, they go on polling their test database
and serving their sockets beside the next run. Each carries its run's mark (``JUNE_TEST_RUN``,
the pytest process id, set in the root conftest): a run ends its own strays when it ends, and
at its start ends those of runs that are gone."""

from __future__ import annotations

import os
import signal
from pathlib import Path

MARK = "JUNE_TEST_RUN"


def _marks() -> dict[int, int]:
    """{process id: the run it belongs to} for every process that carries a mark."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(MARK.encode() + b"="):
                value = entry[len(MARK) + 1 :]
                if value.isdigit():
                    found[int(proc.name)] = int(value)
                break
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def orphans() -> list[int]:
    """Processes of runs whose pytest process is gone."""
    me = os.getpid()
    return [pid for pid, run in _marks().items() if pid != me and run != me and not _alive(run)]


def of_run(run: int) -> list[int]:
    """Processes of ``run`` other than its pytest process."""
    return [pid for pid, mark in _marks().items() if mark == run and pid != run]


def reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
