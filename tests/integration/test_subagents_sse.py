"""The HTTP API's SSE carries a parent's children: ``child.event`` frames (no ``id:``; the ids
are the parent's log) with the child's reference, until the parent's terminal event."""

from __future__ import annotations

import pytest

from sessions_app import models as m

from .test_api_sse import BASE, http, read_sse, server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_spawning_turn_streams_its_childrens_events(http):  # noqa: F811
    with http.stream(
        "POST",
        f"{BASE}/sub1/turns",
        json={"text": "research tides and harbours"},
        headers={"Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        turn_id = response.headers["X-June-Turn-Id"]
        events = read_sse(response)
    own = [e for e in events if e["id"] is not None]
    assert own[-1]["event"] == "turn.completed" and [e["event"] for e in own].count("child.started") == 2
    children = [e for e in events if e["event"] == "child.event"]
    assert all(e["id"] is None and e["data"]["child"]["parent_turn"] == turn_id for e in children)
    goals = {e["data"]["child"]["goal"] for e in children}
    assert goals == {"tides", "harbours"}
    for goal in goals:
        types = [e["data"]["event"]["type"] for e in children if e["data"]["child"]["goal"] == goal]
        assert types[0] == "turn.started" and types[-1] == "turn.completed", types
    assert m.Turn.objects.filter(parent_id=turn_id, status="completed").count() == 2
