"""Pause points for fault tests, shared by the test process and the qcluster children.

A point is armed by a file ``arm-<name>`` in JUNE_FAULT_DIR. A process reaching an armed point
writes ``at-<name>`` (its pid) and waits until the arm file is removed, so the test can SIGKILL
(or SIGSTOP) the cluster at a known boundary. Unarmed points cost one ``stat``.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path


def fault_dir() -> Path | None:
    value = os.environ.get("JUNE_FAULT_DIR")
    return Path(value) if value else None


def _reached(name: str) -> Path | None:
    root = fault_dir()
    if root is None:
        return None
    arm = root / f"arm-{name}"
    if not arm.exists():
        return None
    (root / f"at-{name}").write_text(str(os.getpid()))
    return arm


def point(name: str) -> None:
    """Blocking pause (sync tools: they run on the store's thread inside the transaction)."""
    arm = _reached(name)
    while arm is not None and arm.exists():
        time.sleep(0.02)


async def apoint(name: str) -> None:
    """Non-blocking pause (model and async tools): the heartbeat keeps the lease meanwhile."""
    arm = _reached(name)
    while arm is not None and arm.exists():
        await asyncio.sleep(0.02)


def record(kind: str, turn_id: str) -> None:
    """Append a line (this pid) to ``<kind>-<turn_id>``: how many times a side effect ran."""
    root = fault_dir()
    if root is not None:
        with open(root / f"{kind}-{turn_id}", "a") as f:
            f.write(f"{os.getpid()}\n")


def delay() -> float:
    return float(os.environ.get("JUNE_FAULT_DELAY", "0"))
