"""An eval run of 50 cases on real workers, one of which is SIGKILLed mid-run: every case is
scored exactly once (the conditional UPDATE of its score is written once, whoever computes it),
every case's turn completed, and the ``def`` tool each case calls wrote its row once."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from june_evals import driver
from june_evals.models import Dataset, EvalCase, Example

from .qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
CASES = 50


def test_a_worker_killed_mid_run_leaves_every_case_scored_once(clusters, monkeypatch):
    from agents_app.models import Order

    dataset = Dataset.objects.create(name="kill")
    Example.objects.bulk_create(
        Example(
            dataset=dataset,
            name=f"order {n}",
            input=f"order {n} mugs",
            expect={"tool_calls": [{"name": "create_order", "input": {"quantity": n}}]},
        )
        for n in range(1, CASES + 1)
    )
    writes: list[tuple[int, bool]] = []
    lock = threading.Lock()
    write = driver._write_score

    def counted(case, outcome, scores):
        wrote = write(case, outcome, scores)
        with lock:
            writes.append((case.pk, wrote))
        return wrote

    monkeypatch.setattr(driver, "_write_score", counted)
    # slow deltas: turns are in flight when the kill comes
    doomed = clusters.start(JUNE_DEMO_DELAY="0.02")
    survivor = clusters.start(JUNE_DEMO_DELAY="0.02")
    run = driver.run_start(dataset=dataset, versions=[driver.version("ops")], concurrency=10)

    # two drivers score the same run at once (the command line's loop and, say, the admin's)
    def drive_too() -> None:
        try:
            driver.drive(run, timeout=300, poll=0.05)
        finally:
            connections.close_all()  # this thread's connection: the test database is dropped after

    second = threading.Thread(target=drive_too, daemon=True)
    second.start()
    wait_for(lambda: EvalCase.objects.filter(run=run, scored_at__isnull=False).count() >= 10, timeout=120)
    doomed.kill()
    assert driver.drive(run, timeout=300, poll=0.05)
    second.join(timeout=60)

    cases = list(EvalCase.objects.filter(run=run))
    assert len(cases) == CASES and all(c.scored_at for c in cases)
    assert [c.status for c in cases] == ["completed"] * CASES
    assert all(c.passed for c in cases), [c.scores for c in cases if not c.passed]
    written = [pk for pk, wrote in writes if wrote]
    assert sorted(written) == sorted(c.pk for c in cases)  # each case's score written exactly once
    for case in cases:
        assert Order.objects.filter(turn_id=case.turn_id).count() == 1
    assert survivor.alive()
