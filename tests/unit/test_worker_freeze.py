"""``june_worker`` freezes its heap before the cluster forks (docs/workers.md "Memory"): a
child's first collection would otherwise write to every inherited object's header and copy
the pages it shares with its parent (an idle 2-worker cluster: 318-326 MB of PSS, 196 MB with
the freeze)."""

from __future__ import annotations

import pytest

from sessions_app.management.commands import june_worker


def test_the_heap_is_frozen_after_the_warm_up_and_before_the_cluster_starts(monkeypatch):
    order: list[str] = []

    class Cluster:
        def __init__(self) -> None:
            order.append("cluster")

        def run(self) -> int:
            return 0

    def leave(status: int) -> None:
        raise SystemExit(status)

    monkeypatch.setattr(june_worker, "_warm_providers", lambda: order.append("warm"))
    monkeypatch.setattr(june_worker, "_preload_worker_modules", lambda: order.append("preload"))
    monkeypatch.setattr(june_worker, "PromptCluster", Cluster)
    monkeypatch.setattr(june_worker.gc, "freeze", lambda: order.append("freeze"))
    monkeypatch.setattr(june_worker.logging, "shutdown", lambda: None)  # the test's own handlers stay
    monkeypatch.setattr(june_worker.os, "_exit", leave)
    with pytest.raises(SystemExit) as ended:
        june_worker.Command().handle(cluster_name=None, run_once=False)
    assert ended.value.code == 0 and order == ["warm", "preload", "freeze", "cluster"]


#: in a fresh interpreter: Django set up as ``june_worker`` has it, the preload, then what a
#: worker would still import at its start (its runner and its loop) and at a turn's first span
PRELOAD = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
import django
django.setup()
import opentelemetry.trace  # (OpenTelemetry's API: redis's client loads it, with REDIS_URL)
from sessions_app.management.commands import june_worker
june_worker._preload_worker_modules()
before = set(sys.modules)
from sessions_app.workers import runner, tasks, watchdog
from sessions_app.telemetry import setup
import uvloop
setup.observer()
print(",".join(sorted(set(sys.modules) - before)) or "nothing")
"""


def test_a_worker_imports_nothing_at_its_start_that_the_main_process_could_have():
    """Each worker imported about 180 modules after the fork (its runner, uvloop, the channel
    layer's client with redis and OpenTelemetry's API), and at its first turn the OpenTelemetry
    SDK, only to ask whether a test had installed a tracer: pages copied into every worker."""
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    env.pop("JUNE_OTEL_TEST_FILE", None)
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", PRELOAD], capture_output=True, text=True, timeout=120, cwd=root, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "nothing"
