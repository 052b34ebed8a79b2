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
    monkeypatch.setattr(june_worker, "PromptCluster", Cluster)
    monkeypatch.setattr(june_worker.gc, "freeze", lambda: order.append("freeze"))
    monkeypatch.setattr(june_worker.logging, "shutdown", lambda: None)  # the test's own handlers stay
    monkeypatch.setattr(june_worker.os, "_exit", leave)
    with pytest.raises(SystemExit) as ended:
        june_worker.Command().handle(cluster_name=None, run_once=False)
    assert ended.value.code == 0 and order == ["warm", "freeze", "cluster"]
