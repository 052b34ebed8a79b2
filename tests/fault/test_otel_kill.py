"""Traces across a SIGKILL: a worker killed in the middle of a turn, a fresh one finishing it.
Both worker processes export their spans to one JSON-lines file (``JUNE_OTEL_TEST_FILE``); the
spans the killed one finished carry the request's trace, and the finishing attempt is a new
``invoke_agent`` span linked to that trace (a resume), with its own model and tool spans."""

from __future__ import annotations

import json

import pytest

from agents_app.runtime.seams import FINAL_STATUSES

from .qcluster import Clusters, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
REQUEST_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{REQUEST_SPAN}-01"


@pytest.fixture(scope="module")
def traced_clusters(tmp_path_factory, django_db_setup, django_db_blocker):
    workdir = tmp_path_factory.mktemp("otel-qcluster")
    spans = workdir / "spans.jsonl"
    manager = Clusters(workdir, JUNE_OTEL_TEST_FILE=str(spans))
    manager.spans = spans
    try:
        yield manager
    finally:
        manager.stop_all()


def read_spans(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_a_turn_killed_mid_way_is_resumed_in_a_linked_span(traced_clusters, fault_agent, monkeypatch):
    from sessions_app import services, telemetry
    from sessions_app.models import Turn

    clusters = traced_clusters
    # the request's span (as a traced web process would have it): stored with the turn
    monkeypatch.setattr(telemetry, "traceparent", lambda: TRACEPARENT)
    first = clusters.start()
    clusters.arm("ping:before")  # after the sync tool ran, before the async one
    turn_id = services.turn_start(agent=fault_agent, key="otel-kill", text="mugs", source="http").turn_id
    assert Turn.objects.get(pk=turn_id).input["trace"] == TRACEPARENT
    killed_pid = clusters.reached("ping:before")
    first.kill()
    clusters.disarm("ping:before")
    clusters.start()
    wait_for(lambda: Turn.objects.get(pk=turn_id).status in FINAL_STATUSES, timeout=90, what="the turn to end")
    assert Turn.objects.get(pk=turn_id).status == "completed"
    spans = wait_for(
        lambda: (
            (
                s := [
                    x
                    for x in read_spans(clusters.spans)
                    if x["attributes"].get("june.turn.id") == turn_id
                    or x["attributes"].get("gen_ai.conversation.id", "").endswith("/otel-kill")
                ]
            )
            and any(x["name"].startswith("invoke_agent") for x in s)
            and s
        ),
        timeout=10,
        what="the finishing worker's turn span",
    )
    before = [s for s in spans if s["pid"] == killed_pid]
    after = [s for s in spans if s["pid"] != killed_pid]
    # the killed worker never ended its turn span; what it finished is in the request's trace
    assert not [s for s in before if s["name"].startswith("invoke_agent")]
    assert {s["attributes"]["gen_ai.operation.name"] for s in before} >= {"chat", "execute_tool"}
    assert {s["trace_id"] for s in before} == {TRACE_ID}
    assert [s["attributes"]["gen_ai.tool.name"] for s in before if s["name"].startswith("execute_tool")] == [
        "fault_write"
    ]
    # the finishing attempt: a new trace, linked to the request's, its steps under it
    [turn] = [s for s in after if s["name"].startswith("invoke_agent")]
    assert turn["parent_id"] is None and turn["trace_id"] != TRACE_ID
    assert turn["links"] == [{"trace_id": TRACE_ID, "span_id": REQUEST_SPAN}]
    assert turn["attributes"]["june.turn.resumed"] is True and turn["attributes"]["june.turn.attempt"] >= 2
    assert turn["attributes"]["june.turn.status"] == "completed"
    steps = [s for s in after if s is not turn]
    assert steps and {s["parent_id"] for s in steps} == {turn["span_id"]}
    assert "fault_ping" in [s["attributes"].get("gen_ai.tool.name") for s in steps]
