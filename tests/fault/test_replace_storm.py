"""A replace storm: hundreds of ``?wait=false`` starts with ``replace: true`` on one session while
two real qclusters run its turns (each replace cancels the turn a worker is checkpointing)."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from agents_app.runtime.seams import FINAL_STATUSES

from .qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

STARTS = 200
TERMINAL = ("turn.completed", "turn.failed", "turn.cancelled")


def test_a_replace_storm_never_deadlocks(clusters, fault_agent, django_user_model, settings):
    """Pins the worker's DeadlockDetected under 400 sequential ``replace=true`` POSTs (issue 13,
    item 8; the sweeper re-ran the turn ~10 s later): a checkpoint locked turn-then-session, a
    replace session-then-turns. Zero deadlocks in the workers' logs; every turn ends once."""
    from sessions_app import models as m

    settings.JUNE_RATE_TURNS_PER_MINUTE = 0  # one user's 200 POSTs in seconds
    workers = [clusters.start(), clusters.start()]
    user = django_user_model.objects.create_user("storm", password="pw-storm-123")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {m.ApiToken.issue(user)[1]}")
    ids = []
    began = time.monotonic()
    for n in range(STARTS):
        response = client.post(
            f"/api/agents/{fault_agent}/sessions/storm/turns?wait=false",
            data=json.dumps({"text": f"mugs {n}", "replace": True}),
            content_type="application/json",
        )
        assert response.status_code == 202, response.content[:300]
        ids.append(response.json()["turn_id"])
    posting = time.monotonic() - began
    wait_for(
        lambda: m.Turn.objects.filter(pk__in=ids, status__in=FINAL_STATUSES).count() == STARTS,
        timeout=90,
        what="every turn of the storm to end",
    )
    log = "\n".join(w.output() for w in workers)
    assert "deadlock" not in log.lower(), [line for line in log.splitlines() if "eadlock" in line][:5]
    statuses = dict(m.Turn.objects.filter(pk__in=ids).values_list("id", "status"))
    assert statuses[ids[-1]] == "completed", "the last start is not replaced"
    assert set(statuses.values()) <= {"completed", "cancelled"}, "no turn failed"
    terminal = {}
    for turn_id, kind in m.Event.objects.filter(turn_id__in=ids, type__in=TERMINAL).values_list("turn_id", "type"):
        terminal.setdefault(turn_id, []).append(kind)
    assert all(len(terminal.get(t, [])) == 1 for t in ids), "every turn has exactly one terminal event"
    ran = sum(1 for s in statuses.values() if s == "completed")
    claimed = m.Turn.objects.filter(pk__in=ids, attempts__gt=0).count()
    print(
        f"replace storm: {STARTS} starts in {posting:.1f} s, {claimed} ran on a worker, {ran} completed, "
        f"{STARTS - ran} cancelled, 0 deadlocks"
    )
