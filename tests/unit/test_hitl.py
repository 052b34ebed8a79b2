"""Human in the loop: park, pending, resume, answer validation and who may answer."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import (
    Agent,
    AuthorizeAnswerError,
    Grant,
    InvalidAnswerError,
    ModelRequest,
    ResumeAuthorizationError,
    ScriptedModel,
    SessionStatus,
    SessionSuspendedError,
    TurnConflictError,
    TurnInput,
    TurnNotResumable,
    TurnParkedError,
    TurnStatus,
    grant_answer,
    reply,
    tool,
)

from ._support import event_types, logged, make_runtime

UNSET = object()


def script(request: ModelRequest) -> Any:
    if request.messages[-1].role == "tool":
        return reply(f"done: {request.messages[-1].result}")
    return reply("", ("deploy", {}))


class Setup:
    def __init__(self, answerers: Any = UNSET, schema: Any = None, authorize_answer: Any = None) -> None:
        self.calls: list[Any] = []
        self.got: list[Any] = []
        calls, got = self.calls, self.got

        @tool("deploy", "needs approval")
        async def deploy(input: dict[str, Any], ctx: Any) -> Any:
            calls.append(ctx.call_id)
            kw = {} if answerers is UNSET else {"answerers": answerers}
            answer = await ctx.request_input(id="approve", prompt="Deploy?", schema=schema or {"type": "boolean"}, **kw)
            got.append(answer)
            return {"approved": answer}

        self.agent = Agent("a", "instr", tools=[deploy], authorize_answer=authorize_answer)
        self.model = ScriptedModel(script)
        self.rt, self.store, self.sink = make_runtime(self.agent, self.model)
        self.s = self.rt.session("a", "s1")

    async def park(self, input: str | TurnInput = "hello") -> str:
        tid = await self.s.start(input)
        res = await self.s.result(tid, timeout=5)
        assert res.status == TurnStatus.SUSPENDED, res
        return tid

    async def status(self, tid: str) -> TurnStatus:
        return (await self.store.get_turn(tid)).status

    async def resume(self, tid: str, answer: Any = True, **kw: Any) -> TurnStatus:
        await self.s.resume(tid, "approve", answer, **kw)
        return (await self.s.result(tid, timeout=5)).status


async def test_request_input_parks_the_turn_durably():
    t = Setup()
    tid = await t.s.start(TurnInput("hello", raw={"secret": "signature"}))
    res = await t.s.result(tid, timeout=5)
    assert res.status == TurnStatus.SUSPENDED
    assert res.request == {"id": "approve", "prompt": "Deploy?", "schema": {"type": "boolean"}, "answerers": None}
    assert t.store.session_status(t.s.ref) == SessionStatus.SUSPENDED
    [requested] = await logged(t.store, t.s.ref, "input.requested")
    assert requested.request == res.request and requested.call_id == "c0"
    [pending] = await t.s.pending()
    assert pending["turn_id"] == tid and pending["call_id"] == "c0" and pending["request"] == res.request
    assert pending["opening_text"] == "hello"
    assert pending["policy"] == t.agent.policy_for(None)
    assert pending["inbound"]["text"] == "hello" and "raw" not in pending["inbound"]
    assert "signature" not in repr(pending)
    assert [m.role for m in t.store.transcript(t.s.ref)] == ["user", "assistant"]  # no tool result yet
    assert t.got == []


async def test_turn_rejects_when_the_turn_parks():
    t = Setup()
    with pytest.raises(TurnParkedError) as info:
        await t.s.turn("hello", timeout=5)
    assert info.value.result.request["id"] == "approve"


async def test_start_while_suspended_is_refused():
    t = Setup()
    tid = await t.park()
    with pytest.raises(SessionSuspendedError):
        await t.s.start("another")
    assert await t.status(tid) == TurnStatus.SUSPENDED


async def test_resume_reruns_the_tool_from_the_top_with_the_answer():
    t = Setup()
    tid = await t.park()
    assert await t.resume(tid, True) == TurnStatus.COMPLETED
    assert t.calls == ["c0", "c0"] and t.got == [True]
    assert (await t.store.get_turn(tid)).text == "done: {'approved': True}"
    assert t.store.session_status(t.s.ref) == SessionStatus.IDLE
    assert await t.s.pending() == []
    assert await event_types(t.store, t.s.ref) == [
        "turn.started",
        "action.requested",
        "input.requested",
        "input.answered",
        "turn.started",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    starts = await logged(t.store, t.s.ref, "turn.started")
    assert [e.trigger for e in starts] == ["inbound", "resume"]


async def test_answers_are_turn_scoped():
    t = Setup()
    first = await t.park()
    await t.resume(first, True)
    second = await t.park("again")  # the same input id parks again in a new turn
    assert second != first and t.got == [True]
    assert await t.resume(second, False) == TurnStatus.COMPLETED
    assert t.got == [True, False]


async def test_an_answer_not_matching_the_schema_is_refused_and_not_applied():
    t = Setup()
    tid = await t.park()
    with pytest.raises(InvalidAnswerError):
        await t.s.resume(tid, "approve", "yes")
    assert await t.status(tid) == TurnStatus.SUSPENDED and len(await t.s.pending()) == 1
    assert await logged(t.store, t.s.ref, "input.answered") == []
    assert await t.resume(tid, True) == TurnStatus.COMPLETED and t.got == [True]


async def test_user_answerers_only_that_user():
    t = Setup(answerers={"user": "u1"})
    tid = await t.park()
    for by in ("u2", None):
        with pytest.raises(ResumeAuthorizationError):
            await t.s.resume(tid, "approve", True, by=by)
    with pytest.raises(ResumeAuthorizationError):  # a grant never answers a user
        await t.s.resume(tid, "approve", True, granted=Grant("operator", "x"))
    assert await t.status(tid) == TurnStatus.SUSPENDED
    assert await t.resume(tid, True, by="u1") == TurnStatus.COMPLETED


async def test_policy_answerers_need_the_exact_grant():
    t = Setup(answerers={"policy": "operator", "scope": "x"})
    tid = await t.park()
    with pytest.raises(ResumeAuthorizationError):
        await t.s.resume(tid, "approve", True, by="boss")  # by alone never answers a policy
    with pytest.raises(ResumeAuthorizationError):
        await t.s.resume(tid, "approve", True, by="boss", granted=Grant("operator", "y"))
    with pytest.raises(ResumeAuthorizationError):
        await t.s.resume(tid, "approve", True, granted=Grant("admin", "x"))
    assert await t.status(tid) == TurnStatus.SUSPENDED
    assert await t.resume(tid, True, by="boss", granted=Grant("operator", "x")) == TurnStatus.COMPLETED


async def test_default_answerer_is_the_attested_speaker():
    t = Setup()
    tid = await t.park(TurnInput("hello", user={"id": "u1", "attested": True}))
    [pending] = await t.s.pending()
    assert pending["request"]["answerers"] == {"user": "u1"}
    with pytest.raises(ResumeAuthorizationError):
        await t.s.resume(tid, "approve", True, by="u2")
    assert await t.resume(tid, True, by="u1") == TurnStatus.COMPLETED


async def test_unattested_speaker_without_answerers_fails_the_turn():
    t = Setup()
    tid = await t.s.start(TurnInput("hello", user={"id": "u1", "attested": False}))
    res = await t.s.result(tid, timeout=5)
    assert res.status == TurnStatus.FAILED
    [failed] = await logged(t.store, t.s.ref, "turn.failed")
    assert failed.phase == "tool" and "answerers=" in failed.error and "not attested" in failed.error
    assert await t.s.pending() == []


async def test_unattested_speaker_with_named_answerers_parks():
    t = Setup(answerers={"user": "u9"})
    tid = await t.park(TurnInput("hello", user={"id": "u1", "attested": False}))
    assert await t.resume(tid, True, by="u9") == TurnStatus.COMPLETED


async def test_no_speaker_is_unrestricted():
    t = Setup()
    tid = await t.park()
    assert (await t.s.pending())[0]["request"]["answerers"] is None
    assert await t.resume(tid, True, by=None) == TurnStatus.COMPLETED


async def test_wrong_input_id_is_a_conflict():
    t = Setup()
    tid = await t.park()
    with pytest.raises(TurnConflictError):
        await t.s.resume(tid, "other", True)
    assert await t.status(tid) == TurnStatus.SUSPENDED


async def test_resume_of_a_completed_turn_is_refused():
    t = Setup()
    tid = await t.park()
    await t.resume(tid, True)
    with pytest.raises(TurnNotResumable):
        await t.s.resume(tid, "approve", True)
    assert t.calls == ["c0", "c0"]


async def test_authorize_answer_raising_applies_nothing_and_a_retry_works():
    state = {"broken": True}

    async def authorize_answer(*, policy: str, scope: Any, by: str | None, principal: Any) -> bool:
        if state["broken"]:
            raise ConnectionError("directory down")
        return policy == "operator" and by == "boss" and principal == {"role": "ops"}

    t = Setup(answerers={"policy": "operator", "scope": "x"}, authorize_answer=authorize_answer)
    tid = await t.park()
    [pending] = await t.s.pending()
    with pytest.raises(AuthorizeAnswerError, match="ConnectionError: directory down"):
        await grant_answer(pending, {"by": "boss", "principal": {"role": "ops"}}, t.agent.authorize_answer)
    assert await t.status(tid) == TurnStatus.SUSPENDED and await t.s.pending() == [pending]
    state["broken"] = False
    assert await grant_answer(pending, {"by": "eve", "principal": {"role": "ops"}}, t.agent.authorize_answer) is None
    grant = await grant_answer(pending, {"by": "boss", "principal": {"role": "ops"}}, t.agent.authorize_answer)
    assert grant == Grant("operator", "x")
    assert await t.resume(tid, True, by="boss", granted=grant) == TurnStatus.COMPLETED


async def test_request_input_from_a_sync_tool_fails_the_turn_clearly():
    """Regression: a sync tool calling ``ctx.request_input`` got an un-awaited coroutine back,
    which is truthy, so it went on as if approved and the turn completed."""
    did: list[Any] = []

    @tool("wipe", "sync, asks anyway")
    def wipe(input: dict[str, Any], ctx: Any) -> Any:
        answer = ctx.request_input(id="approve", prompt="Wipe?", schema={"type": "boolean"})
        did.append(answer)
        return {"wiped": bool(answer)}

    agent = Agent("a", "instr", tools=[wipe])
    rt, store, sink = make_runtime(agent, ScriptedModel([reply("", ("wipe", {})), reply("wiped")]))
    s = rt.session("a", "s1")
    res = await s.result(await s.start("hello"), timeout=5)
    assert did == []
    assert res.status == TurnStatus.FAILED
    [failed] = await logged(store, s.ref, "turn.failed")
    assert failed.phase == "tool" and "request_input" in failed.error and "async" in failed.error


async def test_a_tool_asking_more_questions_than_the_retry_budget_completes():
    """Pins "retry budget exhausted after 5 attempts" for a turn whose tool asked five questions
    (issue 13, item 10): the claim after each resume spent the budget. Answers are free."""
    questions = 7  # more than the executor's max_attempts (5)

    @tool("survey", "asks many questions")
    async def survey(input: dict[str, Any], ctx: Any) -> Any:
        return {
            "answers": [
                await ctx.request_input(id=f"q{n}", prompt=f"Q{n}?", schema={"type": "boolean"})
                for n in range(questions)
            ]
        }

    def survey_script(request: ModelRequest) -> Any:
        if request.messages[-1].role == "tool":
            return reply(f"done: {request.messages[-1].result}")
        return reply("", ("survey", {}))

    rt, store, _ = make_runtime(Agent("a", "instr", tools=[survey]), ScriptedModel(survey_script))
    assert rt.executor.max_attempts < questions
    s = rt.session("a", "s1")
    tid = await s.start("hello")
    for n in range(questions):
        assert (await s.result(tid, timeout=5)).status == TurnStatus.SUSPENDED
        await s.resume(tid, f"q{n}", True)
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.COMPLETED, res
    assert (await store.get_turn(tid)).attempts == 1
