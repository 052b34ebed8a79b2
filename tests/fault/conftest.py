"""Fixtures for fault tests: real qcluster processes on the test database (tests/fault/qcluster.py)
and the fault-test agent (tests/fault/agents/faultagent) loaded in the test process too."""

from __future__ import annotations

import pytest

from .qcluster import Clusters


@pytest.fixture(scope="module")
def clusters(tmp_path_factory, django_db_setup, django_db_blocker):
    manager = Clusters(tmp_path_factory.mktemp("qcluster"))
    try:
        yield manager
    finally:
        manager.stop_all()


def turn_summary(turn_id: str) -> dict:
    """What a turn left in the database, for comparing an interrupted run with a clean one."""
    from agents_app.models import Order
    from sessions_app import models as m
    from sessions_app.selectors import step_keys

    turn = m.Turn.objects.get(pk=turn_id)
    messages = list(m.Message.objects.filter(turn_id=turn_id).order_by("index").values_list("index", "role"))
    events = list(m.Event.objects.filter(turn_id=turn_id).order_by("seq").values_list("seq", "type", "data"))
    return {
        "status": turn.status,
        "phase": turn.phase,
        "attempts": turn.attempts,
        "indices": [i for i, _ in messages],
        "roles": [r for _, r in messages],
        "steps": sorted(step_keys(turn_id)),
        "event_types": [t for _, t, _ in events],
        "event_seqs": [s for s, _, _ in events],
        # the type with the stored data: a row keeps its type in a column (sessions_app.store.eventlog)
        "event_payloads": [repr((t, sorted(d.items()) if isinstance(d, dict) else d)) for _, t, d in events],
        "orders": Order.objects.filter(turn_id=turn_id).count(),
    }
