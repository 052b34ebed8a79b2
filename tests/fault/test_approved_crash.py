"""A ``def`` tool declared with ``approval=`` is approved, then its worker is SIGKILLed while the
tool runs (before its write, or after it but before the unit commits): a fresh cluster
finishes the turn with the approved call's row exactly once, and nobody is asked again
(issue 38: "a sync tool approved then crashed mid-run runs once")."""

from __future__ import annotations

import pytest

from .conftest import turn_summary
from .qcluster import wait_for
from .test_kill import running, start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("point", ["approved:before", "approved:after"])
def test_an_approved_sync_tool_killed_mid_run_runs_once(clusters, fault_agent, point):
    from sessions_app import models as m
    from sessions_app import services

    cluster = running(clusters)
    turn_id = start_turn(fault_agent, f"approved-{point.split(':')[1]}", text="approve-write")
    turn = wait_for(
        lambda: (t := m.Turn.objects.get(pk=turn_id)).status == "suspended" and t,
        timeout=30,
        what="the turn to park on the approval",
    )
    request = turn.pending["request"]
    assert request["kind"] == "tool_approval" and request["tool"] == "fault_approved_write"
    assert turn_summary(turn_id)["orders"] == 0 and clusters.count("approved", turn_id) == 0

    clusters.arm(point)
    services.turn_resume(turn_id=turn_id, input_id=request["id"], answer={"decision": "approve"}, via="api")
    clusters.reached(point)
    cluster.kill()
    clusters.disarm(point)
    running(clusters)
    assert wait_final(turn_id) == "completed"

    s = turn_summary(turn_id)
    assert s["orders"] == 1, "the approved call's row exists exactly once"
    # killed before its write: it ran once; after it: the killed run's write rolled back with its unit
    assert clusters.count("approved", turn_id) == (2 if point == "approved:after" else 1)
    assert s["event_types"].count("input.requested") == 1, "nobody was asked again"
    assert m.Answer.objects.filter(turn_id=turn_id).count() == 1
    assert s["attempts"] >= 2, "a second attempt finished the turn"
