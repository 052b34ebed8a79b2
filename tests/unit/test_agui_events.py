"""The pure fold of June's turn events into an AG-UI run (``agui_events``), checked against the
``ag-ui-protocol`` package's own event types, and the endpoint's answer without the extra."""

from __future__ import annotations

import json

from ag_ui.core import EventType

from sessions_app.web.agui_events import AguiRun, encode
from sessions_app.web.api import extra_missing


def run(events):
    fold = AguiRun(thread_id="th", run_id="r1", turn_id="t1", state={"june": {"turnId": "t1"}})
    out = fold.open()
    for event in events:
        out += fold.feed({"turn_id": "t1", **event})
    return out + fold.close()


def kinds(events):
    return [e.type for e in events]


def test_a_turn_with_a_tool_call_is_one_well_formed_run():
    out = run(
        [
            {"type": "message.delta", "text": "Checking", "offset": 0},
            {"type": "message.completed", "text": "Checking."},
            {"type": "action.requested", "call": {"id": "c1", "name": "lookup_stock", "input": {"item": "mugs"}}},
            {"type": "action.completed", "call_id": "c1", "result": {"n": 3}},
            {"type": "message.completed", "text": "3 mugs."},
            {"type": "turn.completed", "text": "3 mugs."},
        ]
    )
    E = EventType
    assert kinds(out) == [
        E.RUN_STARTED, E.STATE_SNAPSHOT,
        E.TEXT_MESSAGE_START, E.TEXT_MESSAGE_CONTENT, E.TEXT_MESSAGE_CONTENT, E.TEXT_MESSAGE_END,
        E.TOOL_CALL_START, E.TOOL_CALL_ARGS, E.TOOL_CALL_END, E.TOOL_CALL_RESULT,
        E.TEXT_MESSAGE_START, E.TEXT_MESSAGE_CONTENT, E.TEXT_MESSAGE_END,
        E.RUN_FINISHED,
    ]  # fmt: skip
    assert out[0].protocol_version and out[-1].outcome.type == "success" and out[-1].result == "3 mugs."
    wire = json.loads(encode(out[7])[len(b"data: ") :])
    assert wire == {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": '{"item": "mugs"}'}


def test_a_run_that_queued_its_turn_says_so_first_in_a_custom_event():
    out = run([{"type": "turn.queued", "at": "2026-12-07T02:00:00+00:00"}, {"type": "turn.completed", "text": "ok"}])
    assert kinds(out) == [EventType.RUN_STARTED, EventType.STATE_SNAPSHOT, EventType.CUSTOM, EventType.RUN_FINISHED]
    wire = json.loads(encode(out[2])[len(b"data: ") :])
    assert wire == {
        "type": "CUSTOM",
        "name": "june.turn.queued",
        "value": {"turnId": "t1", "at": "2026-12-07T02:00:00+00:00"},
    }


def test_a_parked_turn_ends_the_run_on_its_interrupts():
    request = {"id": "approve:c1", "kind": "tool_approval", "prompt": "Run it?", "schema": {"type": "object"}}
    out = run(
        [
            {"type": "input.requested", "request": {"id": "old"}, "call_id": "c0"},  # a replay's, answered since
            {"type": "input.requested", "request": request, "call_id": "c1", "may_answer": True},
            {"type": "turn.parked"},
        ]
    )
    outcome = out[-1].outcome
    assert outcome.type == "interrupt" and [i.id for i in outcome.interrupts] == ["approve:c1"]
    (interrupt,) = outcome.interrupts
    assert (
        interrupt.tool_call_id == "c1" and interrupt.message == "Run it?" and interrupt.metadata == {"mayAnswer": True}
    )


def test_failed_and_cancelled_runs():
    assert run([{"type": "turn.failed", "error": "down"}])[-1].type == EventType.RUN_ERROR
    assert run([{"type": "turn.cancelled"}])[-1].outcome.type == "cancelled"


def test_without_the_extra_the_endpoint_names_it():
    response = extra_missing("agui", "ag-ui-protocol")(None)
    body = json.loads(response.content)
    assert response.status_code == 501 and "june-django[agui]" in body["error"]["message"]
