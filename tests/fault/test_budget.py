"""The retry budget: a turn whose every attempt kills its worker fails with ``turn.failed``
("retry budget exhausted") after JUNE_MAX_ATTEMPTS attempts, and the next turn of its session
runs. django-q2 alone would never stop redelivering it (a task that kills its worker never
reaches q2's max_attempts)."""

from __future__ import annotations

import pytest

from .conftest import turn_summary
from .test_kill import start_turn, wait_final

# serial: its turn kills its worker at every attempt, and the retry budget waits on lease expiry
# and worker reincarnation, which a parallel run's load once stretched past its 90 s (tests/fault/qcluster)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.serial]


def test_budget_exhausted_fails_the_turn_and_the_chain_moves_on(clusters, fault_agent):
    from sessions_app.models import Event, Turn

    clusters.start(JUNE_MAX_ATTEMPTS="2")
    doomed = start_turn(fault_agent, "budget", text="die")
    after = start_turn(fault_agent, "budget", text="mugs")
    assert wait_final(doomed) == "failed"
    turn = Turn.objects.get(pk=doomed)
    assert turn.attempts == 2 and clusters.count("die", doomed) == 2
    assert turn.error["reason"] == "budget_exhausted"
    failed = Event.objects.get(turn_id=doomed, type="turn.failed")
    assert "retry budget exhausted" in failed.data["error"]
    assert wait_final(after) == "completed"
    assert turn_summary(after)["orders"] == 1
