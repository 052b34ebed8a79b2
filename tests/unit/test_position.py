"""Reading the transcript: where a turn stands, and the request a model is sent."""

from __future__ import annotations

from typing import Any

from agents_app.runtime import (
    Agent,
    FatalToolError,
    Message,
    NextKind,
    Role,
    ScriptedModel,
    ToolCall,
    TurnStatus,
    next_action,
    reply,
    tool,
)
from agents_app.runtime.position import NOT_RUN_RESULT, close_dangling_calls

from ._support import assert_transcript_valid, make_runtime


def assistant(turn: str, *ids: str) -> Message:
    return Message(Role.ASSISTANT, turn_id=turn, tool_calls=tuple(ToolCall(i, "t", {}) for i in ids))


def result(turn: str, call_id: str) -> Message:
    return Message(Role.TOOL, turn_id=turn, call_id=call_id, name="t", result="ok")


def test_next_action_reads_the_turn_tail():
    user = Message(Role.USER, "hi", turn_id="t1")
    assert next_action([], "t1").kind == NextKind.OPEN
    assert next_action([Message(Role.USER, "old", turn_id="t0")], "t1").kind == NextKind.OPEN
    assert (next_action([user], "t1").kind, next_action([user], "t1").index) == (NextKind.MODEL, 1)
    nxt = next_action([user, assistant("t1", "c0", "c1"), result("t1", "c0")], "t1")
    assert (nxt.kind, nxt.index, [c.id for c in nxt.calls]) == (NextKind.TOOLS, 1, ["c1"])
    nxt = next_action([user, assistant("t1", "c0"), result("t1", "c0")], "t1")
    assert (nxt.kind, nxt.index) == (NextKind.MODEL, 3)
    done = [user, Message(Role.ASSISTANT, "bye", turn_id="t1")]
    assert (next_action(done, "t1").kind, next_action(done, "t1").index) == (NextKind.SETTLE, 1)


def test_close_dangling_calls_leaves_a_valid_transcript_alone():
    transcript = [
        Message(Role.USER, "a", turn_id="t0"),
        assistant("t0", "c0"),
        result("t0", "c0"),
        Message(Role.ASSISTANT, "done", turn_id="t0"),
    ]
    assert close_dangling_calls(transcript) == transcript


def test_close_dangling_calls_takes_results_in_any_order_and_sees_one_cut_off_by_a_message():
    """The quick pass (results right after their batch) must agree with the full one: a batch
    answered out of order is whole; a result after another message is not its batch's."""
    answered = [
        Message(Role.USER, "a", turn_id="t0"),
        assistant("t0", "c0", "c1"),
        result("t0", "c1"),
        result("t0", "c0"),
        Message(Role.ASSISTANT, "done", turn_id="t0"),
    ]
    assert close_dangling_calls(answered) == answered
    cut = [
        Message(Role.USER, "a", turn_id="t0"),
        assistant("t0", "c0"),
        Message(Role.USER, "b", turn_id="t1"),
        result("t0", "c0"),
    ]
    out = close_dangling_calls(cut)
    assert out[2] == Message(Role.TOOL, turn_id="t0", call_id="c0", name="t", result=NOT_RUN_RESULT, is_error=True)
    assert out[:2] == cut[:2] and out[3:] == cut[2:]


def test_close_dangling_calls_answers_only_the_calls_of_each_batch():
    """Call ids repeat across turns (c0 every turn), so an answer from another batch counts not."""
    transcript = [
        Message(Role.USER, "one", turn_id="t0"),
        assistant("t0", "c0", "c1"),
        result("t0", "c0"),
        Message(Role.USER, "two", turn_id="t1"),
        assistant("t1", "c0"),
        result("t1", "c0"),
        Message(Role.ASSISTANT, "ok", turn_id="t1"),
    ]
    before = list(transcript)
    out = close_dangling_calls(transcript)
    assert transcript == before  # pure
    assert_transcript_valid(out)
    assert out[3] == Message(Role.TOOL, turn_id="t0", call_id="c1", name="t", result=NOT_RUN_RESULT, is_error=True)
    assert out[:3] == transcript[:3] and out[4:] == transcript[3:]


async def test_a_turn_failed_at_a_tool_leaves_the_next_request_valid():
    """Regression: a turn failed by a FatalToolError left its tool call without a result, and
    every later turn sent that dangling call to the model (the Anthropic API refuses it)."""

    @tool("boom", "fails hard")
    def boom(input: dict[str, Any], ctx: Any) -> Any:
        raise FatalToolError("no")

    model = ScriptedModel([reply("", ("boom", {}), ("boom", {})), reply("next")])
    rt, store, sink = make_runtime(Agent("a", "instr", tools=[boom]), model)
    s = rt.session("a", "s1")
    assert (await s.turn("one", timeout=5)).status == TurnStatus.FAILED
    assert (await s.turn("two", timeout=5)).status == TurnStatus.COMPLETED
    sent = list(model.requests[-1].messages)
    assert_transcript_valid(sent)
    assert [(m.call_id, m.result, m.is_error) for m in sent if m.role == "tool"] == [
        ("c0", NOT_RUN_RESULT, True),
        ("c1", NOT_RUN_RESULT, True),
    ]
    assert [m.role for m in store.transcript(s.ref)] == ["user", "assistant", "user", "assistant"]  # stored as is


async def test_a_turn_repairs_only_the_messages_added_since_the_sessions_last_turn(monkeypatch):
    """``view._earlier``: the earlier turns are repaired once, then each turn repairs only what
    the turn before it added (what ``close_dangling_calls`` looks at does not grow with the
    history); the dangling calls of a failed turn stay closed in every later request; what was
    forgotten is repaired whole."""
    from agents_app.runtime import view

    @tool("boom", "fails hard")
    def boom(input: dict[str, Any], ctx: Any) -> Any:
        raise FatalToolError("no")

    seen: list[int] = []
    close = view.close_dangling_calls
    monkeypatch.setattr(view, "close_dangling_calls", lambda ms: seen.append(len(ms)) or close(ms))
    model = ScriptedModel([reply("", ("boom", {}), ("boom", {}))] + [reply(f"r{n}") for n in range(31)])
    rt, store, sink = make_runtime(Agent("a", "instr", tools=[boom]), model)
    s = rt.session("a", "s1")
    assert (await s.turn("one", timeout=5)).status == TurnStatus.FAILED
    looked: list[int] = []
    for n in range(30):
        seen.clear()
        assert (await s.turn(f"t{n}", timeout=5)).status == TurnStatus.COMPLETED
        looked.append(sum(seen))
        sent = list(model.requests[-1].messages)
        assert_transcript_valid(sent)
        assert [(m.call_id, m.result) for m in sent if m.role == "tool"] == [
            ("c0", NOT_RUN_RESULT),
            ("c1", NOT_RUN_RESULT),
        ]
        assert len(sent) == 2 * (n + 1) + 3  # every turn's user + reply, the two closed calls
    assert looked[0] == 2 + 1 and set(looked[1:]) == {2 + 1}  # the turn before's 2, this turn's 1
    view._EARLIER.clear()  # forgotten (another process, say): the next turn repairs all of it
    seen.clear()
    assert (await s.turn("last", timeout=5)).status == TurnStatus.COMPLETED
    assert sum(seen) == 2 + 2 * 30 + 1
    sent = list(model.requests[-1].messages)
    assert len(sent) == 2 * 31 + 3 and [m.call_id for m in sent if m.role == "tool"] == ["c0", "c1"]
