"""The pure fold of June's turn events into the AI SDK's UI message chunks (``uimessage_chunks``)."""

from __future__ import annotations

from sessions_app.web.uimessage_chunks import UIChunks, sse


def fold(events):
    f = UIChunks("t1")
    out = f.open()
    for event in events:
        out += f.feed({"turn_id": "t1", **event})
    return out + f.close()


def types(chunks):
    return [c["type"] for c in chunks]


def text(chunks):
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def test_live_deltas_then_the_committed_text_send_each_character_once():
    out = fold(
        [
            {"type": "message.delta", "text": "Hel", "offset": 0},
            {"type": "message.delta", "text": "lo", "offset": 3},
            {"type": "message.completed", "text": "Hello!"},
            {"type": "turn.completed", "text": "Hello!"},
        ]
    )
    assert types(out) == [
        "start", "start-step", "text-start", "text-delta", "text-delta", "text-delta", "text-end",
        "finish-step", "finish",
    ]  # fmt: skip
    assert text(out) == "Hello!"


def test_a_stream_that_queued_its_turn_says_so_first_in_a_transient_part():
    out = fold([{"type": "turn.queued", "at": "2026-12-07T02:00:00+00:00"}, {"type": "turn.completed", "text": ""}])
    assert types(out) == ["start", "data-june-turn", "finish"]
    assert out[1] == {
        "type": "data-june-turn",
        "id": "t1-queued",
        "data": {"status": "queued", "turnId": "t1", "at": "2026-12-07T02:00:00+00:00"},
        "transient": True,
    }


def test_a_stream_joined_mid_message_waits_for_the_snapshot_and_repeats_nothing():
    """A resume joins the live deltas past the part it missed: a delta past the gap is held back
    until the sink's snapshot (offset 0) brings the beginning."""
    out = fold(
        [
            {"type": "message.delta", "text": "lo", "offset": 3},  # past a gap: dropped
            {"type": "message.delta", "text": "Hello", "offset": 0, "snapshot": True},
            {"type": "message.delta", "text": "llo w", "offset": 2},  # overlaps: only " w" is new
            {"type": "message.completed", "text": "Hello world"},
        ]
    )
    assert text(out) == "Hello world"


def test_a_replay_sends_a_committed_message_whole():
    out = fold([{"type": "message.completed", "text": "All of it"}, {"type": "turn.completed"}])
    assert text(out) == "All of it" and types(out)[-1] == "finish"


def test_a_tool_call_and_its_result():
    call = {"id": "c1", "name": "lookup_stock", "input": {"item": "mugs"}}
    out = fold(
        [
            {"type": "action.requested", "call": call},
            {"type": "action.completed", "call_id": "c1", "name": "lookup_stock", "result": {"n": 3}},
            {"type": "action.requested", "call": {**call, "id": "c2"}},
            {"type": "action.completed", "call_id": "c2", "name": "lookup_stock", "error": "boom"},
        ]
    )
    start, delta, available = [c for c in out if c["type"].startswith("tool-input")][:3]
    assert start == {"type": "tool-input-start", "toolCallId": "c1", "toolName": "lookup_stock", "dynamic": True}
    assert delta["inputTextDelta"] == '{"item": "mugs"}' and available["input"] == {"item": "mugs"}
    assert {"type": "tool-output-available", "toolCallId": "c1", "output": {"n": 3}} in out
    assert {"type": "tool-output-error", "toolCallId": "c2", "errorText": "boom"} in out


def test_a_tool_approval_the_caller_may_answer_and_one_they_may_not():
    request = {"id": "approve:c1", "kind": "tool_approval", "prompt": "Run it?"}
    mine = fold([{"type": "input.requested", "request": request, "call_id": "c1", "may_answer": True}])
    assert {
        "type": "tool-approval-request",
        "approvalId": "approve:c1",
        "toolCallId": "c1",
        "reason": "Run it?",
    } in mine
    theirs = fold([{"type": "input.requested", "request": request, "call_id": "c1", "may_answer": False}])
    (waiting,) = [c for c in theirs if c["type"] == "data-june-input"]
    assert waiting["data"]["mayAnswer"] is False and waiting["data"]["prompt"] == "Run it?"


def test_an_answer_in_the_log_is_the_approval_response():
    out = fold([{"type": "input.answered", "input_id": "approve:c1", "answer": {"decision": "reject"}}])
    assert {"type": "tool-approval-response", "approvalId": "approve:c1", "approved": False} in out


def test_ends_failed_cancelled_parked():
    assert types(fold([{"type": "turn.failed", "error": "model down"}]))[-1] == "error"
    assert fold([{"type": "turn.cancelled", "reason": "requested"}])[-1] == {"type": "abort", "reason": "requested"}
    assert fold([{"type": "turn.parked"}])[-1] == {"type": "finish", "finishReason": "tool-calls"}
    # nothing after the end
    assert types(fold([{"type": "turn.completed"}, {"type": "message.completed", "text": "x"}]))[-1] == "finish"


def test_sse_frames_one_line_of_json():
    assert sse({"type": "text-delta", "delta": "a\nb"}) == b'data: {"type":"text-delta","delta":"a\\nb"}\n\n'
