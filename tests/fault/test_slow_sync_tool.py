"""A sync tool that runs past its lease (a slow HTTP call) keeps its turn, through real workers:
its turn's heartbeats go on while the tool holds the thread that owns Django's connection, so
no other cluster takes the turn over and the tool runs once.

The tool pauses (``write:before``: in ``fault_write``, before its first query) for three leases
(``JUNE_LEASE_SECONDS`` is 2 in these clusters, and their sweepers look every 0.3 s), with a
second cluster running that would take an expired turn.
"""

from __future__ import annotations

import time

import pytest

from .conftest import turn_summary
from .qcluster import wait_for
from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 2.0  # the clusters' JUNE_LEASE_SECONDS (tests/fault/qcluster.py)


def test_a_sync_tool_running_past_its_lease_keeps_the_turn(clusters, fault_agent):
    from sessions_app.models import Turn

    clusters.start()
    clusters.start()  # the other cluster: it would take the turn were its lease to run out
    clusters.arm("write:before")
    turn_id = start_turn(fault_agent, "slow-sync-tool")
    clusters.reached("write:before")
    paused = time.time()
    # the lease runs out 2 s after the last heartbeat; it is renewed past three leases from now
    # only by heartbeats sent while the tool is paused
    wait_for(
        lambda: (Turn.objects.get(pk=turn_id).lease_expires_at or 0) > paused + 3 * LEASE,
        timeout=6 * LEASE,
        what="heartbeats while the sync tool runs",
    )
    clusters.disarm("write:before")
    assert wait_final(turn_id) == "completed"
    s = turn_summary(turn_id)
    assert s["attempts"] == 1, "another attempt took the turn while the tool ran"
    assert clusters.count("write", turn_id) == 1 and s["orders"] == 1
