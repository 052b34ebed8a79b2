"""Split brain: a worker stopped (SIGSTOP) inside its sync tool past its lease expiry while
another cluster takes the turn over, then resumed (SIGCONT). Its commit is refused (the fence),
its sync-tool write rolls back, the turn completes once.

PostgreSQL only: on SQLite a writer stopped inside its transaction holds the database's single
write lock, so no other process can take over until it resumes (run one cluster on SQLite).
"""

from __future__ import annotations

import signal

import pytest

from tests.conftest import is_postgres

from .conftest import turn_summary
from .qcluster import wait_for
from .test_kill import start_turn, wait_final

pytestmark = pytest.mark.django_db(transaction=True)


def test_stopped_worker_is_fenced_out(clusters, fault_agent):
    if not is_postgres():
        pytest.skip("SQLite: a stopped writer holds the only write lock; split brain needs PostgreSQL")
    from sessions_app.models import Event

    stale = clusters.start()
    clusters.arm("write:after")
    turn_id = start_turn(fault_agent, "split-brain")
    clusters.reached("write:after")  # the Order row is written, its transaction still open
    stale.signal(signal.SIGSTOP)
    clusters.disarm("write:after")
    taker = clusters.start()
    assert wait_final(turn_id) == "completed"
    s = turn_summary(turn_id)
    assert s["orders"] == 1 and clusters.count("write", turn_id) == 2  # ran twice, one row
    stale.signal(signal.SIGCONT)
    wait_for(lambda: "lost its lease" in stale.output(), timeout=60, what="the stale attempt to be refused")
    after = turn_summary(turn_id)
    assert after["orders"] == 1, "the stale attempt's sync-tool write rolled back"
    assert after["roles"] == ["user", "assistant", "tool", "tool", "assistant"]
    assert after["indices"] == [0, 1, 2, 3, 4]
    assert after["event_types"] == s["event_types"], "the stale attempt emitted nothing"
    assert Event.objects.filter(turn_id=turn_id, type="turn.completed").count() == 1
    assert after["attempts"] >= 2
    assert taker.alive()
