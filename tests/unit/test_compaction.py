"""Compaction on fakes: the boundary rules (by table), the summarizer's request, the reactive
and proactive paths, failures, and compaction turned off."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import (
    Agent,
    Message,
    ModelError,
    ModelRequest,
    Role,
    ScriptedModel,
    StopReason,
    ToolCall,
    TurnStatus,
    reply,
    tool,
)
from agents_app.runtime.compaction import (
    Compaction,
    compaction_config,
    live_view,
    proactive_due,
    reactive_count,
    render,
    select_boundary,
    summary_request,
    view_tokens,
)
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.model import ContextOverflowError

from ._support import assert_transcript_valid, delta_texts, logged, make_runtime


def U(text: str = "u", turn: str = "t") -> Message:
    return Message(Role.USER, text=text, turn_id=turn)


def A(text: str = "a", *calls: str, turn: str = "t") -> Message:
    return Message(Role.ASSISTANT, text=text, turn_id=turn, tool_calls=tuple(ToolCall(c, "f", {}) for c in calls))


def T(call: str, turn: str = "t", error: bool = False) -> Message:
    return Message(Role.TOOL, turn_id=turn, call_id=call, name="f", result={"ok": call}, is_error=error)


def S(text: str = "old summary") -> Message:
    return Message(Role.SUMMARY, text=text, boundary=0)


def view(*messages: Message) -> list[tuple[int, Message]]:
    return list(enumerate(messages))


# --- the boundary, by table ------------------------------------------------------------------

CASES = [
    # (name, view, keep_last, expected view index of the cut)
    ("keeps the last two exchanges", view(U(), A(), U(), A(), U(), A()), 2, 2),
    ("keep_last 1 keeps only the current exchange", view(U(), A(), U(), A()), 1, 2),
    ("nothing older than the kept exchanges", view(U(), A(), U(), A()), 2, None),
    ("never cuts between a call and its result", view(U(), A("", "c1"), T("c1"), A(), U(), A("", "c2"), T("c2")), 1, 4),
    ("keep_last 0 cuts at the last assistant message", view(U(), A("", "c1"), T("c1"), A("", "c2"), T("c2")), 0, 3),
    ("keep_last 0 with no assistant cuts at the last exchange", view(U(), A(), U("big")), 0, 2),
    (
        "an owed call (parked request) stays verbatim",
        view(U(), A(), U(), A("", "c1"), T("c1"), A("", "c2", "c3"), T("c2")),
        0,
        5,
    ),
    ("an owed call keeps its exchange", view(U(), A(), U(), A("", "c9")), 1, 2),
    ("only the old summary before the cut: nothing to do", view(S(), U(), A(), U(), A()), 2, None),
    ("the old summary is summarized again with what follows it", view(S(), U(), A(), U(), A(), U(), A()), 2, 3),
    ("a trigger opens an exchange", view(U(), A(), Message(Role.TRIGGER, text="tick"), A()), 1, 2),
    ("an empty view", view(), 2, None),
]


@pytest.mark.parametrize("name,v,keep_last,expected", CASES, ids=[c[0] for c in CASES])
def test_select_boundary(name, v, keep_last, expected):
    k = select_boundary(v, keep_last=keep_last)
    assert k == expected
    if k is not None:  # whatever is kept is a valid transcript on its own
        kept = [m for _, m in v[k:]]
        assert kept[0].role != Role.TOOL
        calls = {c.id for m in kept for c in m.tool_calls}
        assert all(m.call_id in calls for m in kept if m.role == Role.TOOL)


def test_the_view_is_the_summary_then_the_messages_from_the_boundary():
    log = [U("0"), A("1"), U("2"), A("3"), Message(Role.SUMMARY, text="s", boundary=2), U("5"), A("6")]
    assert [(p, m.text) for p, m in live_view(log, 0, 2, 4)] == [(4, "s"), (2, "2"), (3, "3"), (5, "5"), (6, "6")]
    # a transcript loaded from position 2 on
    assert [(p, m.text) for p, m in live_view(log[2:], 2, 2, 4)] == [(4, "s"), (2, "2"), (3, "3"), (5, "5"), (6, "6")]
    # an older summary inside the range is not shown again
    log2 = log + [Message(Role.SUMMARY, text="s2", boundary=5)]
    assert [m.text for _, m in live_view(log2, 0, 5, 7)] == ["s2", "5", "6"]


def test_the_summarizer_request_has_no_tools_no_system_prompt_and_no_dangling_or_errored_calls():
    part = [
        S("before"),
        U("order tea"),
        A("calling", "c1", "c2"),
        T("c1"),
        T("c2", error=True),
        A("again", "c3"),
        U("next"),
    ]  # c3 never got a result (its turn failed)
    request = summary_request(part, Compaction(instruction="SUMMARIZE"), window=10_000)
    assert request.tools == () and request.system == "SUMMARIZE" and request.purpose == "compact"
    [message] = request.messages
    assert message.role == Role.USER and not message.tool_calls
    text = message.text
    assert text.startswith("[Summary of the earlier conversation]\nbefore")
    assert "c1" in text and "Result of f" in text
    assert "c2" not in text and "c3" not in text  # errored and dangling calls are left out
    assert "User: next" in text


def test_the_summarizer_request_is_cut_to_fit_the_window_keeping_the_old_summary():
    part = [S("the old summary")] + [U("x" * 500) for _ in range(100)]
    request = summary_request(part, Compaction(instruction="I"), window=2_000)
    text = request.messages[0].text
    assert len(text) <= 2_000 * 4 * 0.5
    assert text.startswith("[Summary of the earlier conversation]\nthe old summary")
    assert "earlier lines left out to fit" in text


def test_render_keeps_results_with_their_calls():
    lines = render([A("", "c1"), T("c1")])
    assert lines == ["Assistant called f({})", 'Result of f: {"ok": "c1"}']


def test_proactive_due_and_reactive_count_read_the_transcript():
    config = Compaction(threshold=0.5)
    big = Message(Role.ASSISTANT, text="r", usage={"input_tokens": 600})
    small = Message(Role.ASSISTANT, text="r", usage={"input_tokens": 100})
    assert proactive_due(config, 1000, [U(), big], lambda: 0)
    assert not proactive_due(config, 1000, [U(), small], lambda: 0)
    assert not proactive_due(config, 1000, [U(), big, S()], lambda: 0)  # compacted already
    assert not proactive_due(config, None, [U(), big], lambda: 0)  # no window known
    assert not proactive_due(Compaction(enabled=False), 1000, [U(), big], lambda: 0)
    # no usage reported: the estimate decides
    assert proactive_due(config, 1000, [U(), A()], lambda: 700)
    assert reactive_count([U(), S(), S()]) == 2 and reactive_count([U(), A(), S()]) == 1 and reactive_count([U()]) == 0


def test_compaction_config_from_agent_py():
    assert compaction_config(False).enabled is False
    assert compaction_config(None) == Compaction()
    assert compaction_config({"threshold": 0.5, "keep_last": 3}).keep_last == 3
    for bad in ({"treshold": 0.5}, {"threshold": 0}, {"keep_last": 0}, {"instruction": " "}, "yes"):
        with pytest.raises(AgentConfigError):
            compaction_config(bad)
    assert Agent("a", compaction={"keep_last": 4}).compaction.keep_last == 4


# --- the loop --------------------------------------------------------------------------------


def usage_of(request: ModelRequest) -> dict[str, int]:
    """What a provider reports: the request's size as input tokens."""
    return {"input_tokens": view_tokens(request.system, request.messages), "output_tokens": 5}


def summarizing(script: Any, summary: str = "SUMMARY") -> Any:
    """A model script that answers a compaction's call with ``summary``."""

    def run(request: ModelRequest) -> Any:
        if request.purpose == "compact":
            assert request.tools == ()
            return reply(summary, usage={"input_tokens": 50, "output_tokens": 10})
        return script(request)

    return run


async def drive(agent: Agent, model: ScriptedModel, *texts: str) -> tuple[Any, Any, Any, list[Any]]:
    rt, store, sink = make_runtime(agent, model)
    s = rt.session(agent.name, "s1")
    results = [await s.turn(text, timeout=5) for text in texts]
    return store, sink, s, results


async def test_reactive_overflow_compacts_and_redoes_the_step():
    state = {"overflowed": False}

    def script(request: ModelRequest) -> Any:
        if request.messages[-1].text == "third" and not state["overflowed"]:
            state["overflowed"] = True
            return reply(stop=StopReason.CONTEXT_OVERFLOW)
        return reply(f"re: {request.messages[-1].text}")

    model = ScriptedModel(summarizing(script))
    agent = Agent("a", "SYSTEM PROMPT", compaction={"keep_last": 1})
    store, sink, s, results = await drive(agent, model, "first", "second", "third")
    assert [r.status for r in results] == [TurnStatus.COMPLETED] * 3
    assert results[-1].text == "re: third"
    roles = [str(m.role) for m in store.transcript(s.ref)]
    # the message log keeps every original; the summary follows the overflowed step's position
    assert roles == ["user", "assistant", "user", "assistant", "user", "summary", "assistant"]
    summarize, redo = model.requests[-2], model.requests[-1]
    assert summarize.purpose == "compact" and "SYSTEM PROMPT" not in summarize.messages[0].text
    assert "User: first" in summarize.messages[0].text and "third" not in summarize.messages[0].text
    assert [(str(m.role), m.text) for m in redo.messages] == [("summary", "SUMMARY"), ("user", "third")]
    [done] = await logged(store, s.ref, "compaction.completed")
    assert (done.reason, done.messages, done.boundary, done.index, done.summary) == ("reactive", 4, 4, 5, "SUMMARY")
    types = [e.event.type for e in await store.events(s.ref) if e.event.turn_id == results[-1].turn_id]
    assert types == [
        "turn.started",
        "compaction.started",
        "compaction.completed",
        "message.completed",
        "turn.completed",
    ]
    # the summary's deltas were not streamed as the assistant's text
    assert "SUMMARY" not in "".join(delta_texts(sink))
    # the next load reads from the boundary only
    nxt = await s.start("fourth")
    await s.result(nxt, timeout=5)
    state_ = await store.load(nxt)
    assert state_.base == 4 and state_.summary == 5 and state_.transcript[0].text == "third"


async def test_a_400_prompt_too_long_error_compacts_too():
    calls = {"n": 0}

    def script(request: ModelRequest) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            return ContextOverflowError("prompt is too long: 300000 tokens > 200000 maximum")
        return reply("ok")

    model = ScriptedModel(summarizing(script))
    store, _, s, results = await drive(Agent("a", "i", compaction={"keep_last": 1}), model, "1", "2", "3")
    assert [r.status for r in results] == [TurnStatus.COMPLETED] * 3
    assert len(await logged(store, s.ref, "compaction.completed")) == 1


async def test_overflow_after_two_compactions_fails_the_turn_with_a_clear_reason():
    def script(request: ModelRequest) -> Any:
        if request.messages[-1].text == "huge":
            return reply(stop=StopReason.CONTEXT_OVERFLOW)
        return reply("ok", ("f", {})) if request.messages[-1].role == Role.USER else reply("done")

    @tool("f", "a tool")
    async def f(input: dict[str, Any], ctx: Any) -> Any:
        return {"ok": True}

    model = ScriptedModel(summarizing(script))
    store, _, s, results = await drive(Agent("a", "i", tools=[f]), model, "1", "2", "3", "huge")
    assert [r.status for r in results] == [TurnStatus.COMPLETED] * 3 + [TurnStatus.FAILED]
    assert "still exceeded after 2 compactions" in results[-1].error["message"]
    assert len(await logged(store, s.ref, "compaction.completed")) == 2
    assert_transcript_valid(store.transcript(s.ref))


async def test_a_single_message_larger_than_the_window_fails_clearly():
    model = ScriptedModel(summarizing(lambda request: reply(stop=StopReason.CONTEXT_OVERFLOW)))
    store, _, s, results = await drive(Agent("a", "i"), model, "x" * 1000)
    assert results[0].status == TurnStatus.FAILED
    assert "nothing is left to summarize" in results[0].error["message"]
    assert await logged(store, s.ref, "compaction.started") == []


async def test_an_empty_summary_fails_and_never_moves_the_boundary():
    state = {"n": 0}

    def script(request: ModelRequest) -> Any:
        state["n"] += 1
        return reply(stop=StopReason.CONTEXT_OVERFLOW) if request.messages[-1].text == "3" else reply("ok")

    model = ScriptedModel(summarizing(script, summary="   "))
    store, _, s, results = await drive(Agent("a", "i", compaction={"keep_last": 1}), model, "1", "2", "3")
    assert results[-1].status == TurnStatus.FAILED
    assert "without a summary" in results[-1].error["message"]
    assert [m.role for m in store.transcript(s.ref)].count(Role.SUMMARY) == 0
    assert await logged(store, s.ref, "compaction.completed") == []


async def test_a_summarizer_answering_with_a_tool_call_is_a_failure_not_a_boundary():
    def run(request: ModelRequest) -> Any:
        if request.purpose == "compact":
            return reply("", ("f", {}))
        return reply(stop=StopReason.CONTEXT_OVERFLOW) if request.messages[-1].text == "3" else reply("ok")

    store, _, s, results = await drive(Agent("a", "i", compaction={"keep_last": 1}), ScriptedModel(run), "1", "2", "3")
    assert results[-1].status == TurnStatus.FAILED and "with a tool call" in results[-1].error["message"]


async def test_proactive_compaction_after_a_settled_turn():
    model = ScriptedModel(summarizing(lambda request: reply("r" * 200, usage=usage_of(request))))
    agent = Agent("a", "i", compaction={"context_window": 400, "threshold": 0.5, "keep_last": 1})
    store, sink, s, results = await drive(agent, model, *[f"message {i}" for i in range(8)])
    assert all(r.status == TurnStatus.COMPLETED for r in results)
    done = await logged(store, s.ref, "compaction.completed")
    assert done and all(d.reason == "proactive" for d in done)
    # every request stayed under the window; the summary always came first once compacted
    turns = [r for r in model.requests if r.purpose == "turn"]
    assert all(view_tokens(r.system, r.messages) < 400 for r in turns)
    assert turns[-1].messages[0].role == Role.SUMMARY
    # the turn's reply is its own, not the summary; and the turn ended after its compaction
    assert results[-1].text == "r" * 200
    types = [e.event.type for e in await store.events(s.ref)]
    at = types.index("compaction.completed")
    assert types[at - 2 : at + 2] == [
        "message.completed",
        "compaction.started",
        "compaction.completed",
        "turn.completed",
    ]


async def test_a_failed_proactive_compaction_completes_the_turn_and_logs_it():
    model = ScriptedModel(summarizing(lambda request: reply("r" * 200, usage=usage_of(request)), summary=""))
    agent = Agent("a", "i", compaction={"context_window": 400, "threshold": 0.5, "keep_last": 1})
    store, _, s, results = await drive(agent, model, *"123456")
    assert all(r.status == TurnStatus.COMPLETED for r in results)
    assert await logged(store, s.ref, "compaction.failed")
    assert Role.SUMMARY not in [m.role for m in store.transcript(s.ref)]


async def test_compaction_off_is_todays_behaviour():
    model = ScriptedModel(
        lambda request: (
            reply(stop=StopReason.CONTEXT_OVERFLOW)
            if request.messages[-1].text == "2"
            else reply("r", usage={"input_tokens": 10**6})
        )
    )
    agent = Agent("a", "i", compaction=False)
    store, _, s, results = await drive(agent, model, "1", "2")
    assert results[0].status == TurnStatus.COMPLETED
    assert results[1].status == TurnStatus.FAILED
    assert results[1].error["message"] == "the model stopped (context_overflow) without a reply"
    assert all(r.purpose == "turn" for r in model.requests)
    state = await store.load(results[1].turn_id)
    assert state.base == 0 and len(state.transcript) == 3


async def test_chained_compactions_leave_no_orphan_in_any_request():
    """Regression (failure class): chained compactions let an orphan tool result survive in
    the kept window of the second; every request the model gets must pair calls and results."""

    @tool("f", "a tool")
    async def f(input: dict[str, Any], ctx: Any) -> Any:
        return {"data": "d" * 100}

    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        n = sum(1 for m in request.messages if m.role == Role.TOOL and m.turn_id == last.turn_id)
        if last.role == Role.TOOL and n >= 3:
            return reply("done", usage=usage_of(request))
        return reply("", ToolCall(f"c{len(request.messages)}", "f", {}), usage=usage_of(request))

    model = ScriptedModel(summarizing(script))
    agent = Agent("a", "i", tools=[f], compaction={"context_window": 300, "threshold": 0.6, "keep_last": 1})
    store, _, s, results = await drive(agent, model, *[f"go {i}" for i in range(10)])
    assert all(r.status == TurnStatus.COMPLETED for r in results)
    assert len(await logged(store, s.ref, "compaction.completed")) >= 3
    for request in model.requests:
        sent = [m for m in request.messages]
        if request.purpose == "turn":
            assert sent[0].role != Role.TOOL
            assert_transcript_valid(sent)
            called = {c.id for m in sent for c in m.tool_calls}
            assert all(m.call_id in called for m in sent if m.role == Role.TOOL)


async def test_a_retryable_error_of_the_summarizer_redelivers():
    state = {"failed": False}

    def run(request: ModelRequest) -> Any:
        if request.purpose == "compact":
            if not state["failed"]:
                state["failed"] = True
                return ModelError("overloaded", retryable=True)
            return reply("S")
        return (
            reply(stop=StopReason.CONTEXT_OVERFLOW)
            if request.messages[-1].text == "3" and request.messages[0].role != Role.SUMMARY
            else reply("ok")
        )

    model = ScriptedModel(run)
    store, _, s, results = await drive(Agent("a", "i", compaction={"keep_last": 1}), model, "1", "2", "3")
    assert results[-1].status == TurnStatus.COMPLETED
    assert len(await logged(store, s.ref, "compaction.started")) == 1  # announced once
    assert len(await logged(store, s.ref, "compaction.completed")) == 1


async def test_a_second_overflow_cuts_inside_the_turn_and_the_turn_still_knows_where_it_stands():
    """The second compaction of a step may cut inside the running turn (at its last assistant
    message); the turn's opening is then before the boundary, and a reload still starts at it."""

    @tool("f", "a tool")
    async def f(input: dict[str, Any], ctx: Any) -> Any:
        return {"data": "x" * 50}

    def script(request: ModelRequest) -> Any:
        last = request.messages[-1]
        mine = [m for m in request.messages if m.turn_id == last.turn_id]
        tools_done = sum(1 for m in mine if m.role == Role.TOOL)
        if any(m.role == Role.USER and m.text != "work" for m in mine):
            return reply("ok")  # the other turns: one plain reply
        if tools_done >= 3 and not (
            request.messages[0].role == Role.SUMMARY and request.messages[1].role == Role.ASSISTANT
        ):
            return reply(stop=StopReason.CONTEXT_OVERFLOW)  # until the cut is inside this turn
        if last.role == Role.USER or (last.role == Role.TOOL and tools_done < 3):
            return reply("", ToolCall(f"c{tools_done}", "f", {}))
        return reply("finished")

    model = ScriptedModel(summarizing(script))
    agent = Agent("a", "i", tools=[f], compaction={"keep_last": 1})
    rt, store, sink = make_runtime(agent, model)
    s = rt.session("a", "s1")
    first = await s.turn("earlier", timeout=5)
    assert first.status == TurnStatus.COMPLETED
    result = await s.turn("work", timeout=5)
    assert result.status == TurnStatus.COMPLETED and result.text == "finished"
    done = await logged(store, s.ref, "compaction.completed")
    assert len(done) == 2
    state = await store.load(result.turn_id)
    log = store.transcript(s.ref)
    opening = next(i for i, m in enumerate(log) if m.turn_id == result.turn_id)
    assert state.boundary > opening and state.base == opening  # loaded from the opening
    assert log[state.boundary].role == Role.ASSISTANT
    redo = [r for r in model.requests if r.purpose == "turn"][-1]
    assert redo.messages[0].role == Role.SUMMARY and redo.messages[1].role == Role.ASSISTANT
    assert_transcript_valid(list(redo.messages))
    # a later turn loads from the boundary only
    nxt = await s.turn("next", timeout=5)
    assert nxt.status == TurnStatus.COMPLETED
    assert (await store.load(nxt.turn_id)).base == state.boundary
