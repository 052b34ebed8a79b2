"""The turn loop on fakes: events, steps, tool results and errors, model stops, usage, retry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

import pytest

from agents_app.runtime import (
    Agent,
    FatalToolError,
    ModelError,
    RecordingSink,
    ScriptedModel,
    SessionRef,
    StopReason,
    TurnInput,
    TurnStatus,
    define_action,
    reply,
    require_handle,
    tool,
)
from agents_app.runtime.session import AgentSession, Runtime, TurnResult

from ._support import FakeClock, delta_texts, event_types, logged, make_executor, make_runtime, roles

NUMBER = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@dataclass
class Ran:
    rt: Runtime
    store: Any
    sink: RecordingSink
    session: AgentSession
    model: ScriptedModel
    turn_id: str
    result: TurnResult

    @property
    def ref(self) -> SessionRef:
        return self.session.ref

    @property
    def transcript(self) -> list[Any]:
        return self.store.transcript(self.ref)

    def tool_messages(self) -> list[Any]:
        return [m for m in self.transcript if m.role == "tool"]


async def run_turn(script: Any, *tools: Any, input: str | TurnInput = "hello", **agent_kw: Any) -> Ran:
    agent = Agent("a", "instr", tools=list(tools), **agent_kw)
    model = script if isinstance(script, ScriptedModel) else ScriptedModel(script)
    rt, store, sink = make_runtime(agent, model)
    s = rt.session("a", "s1")
    tid = await s.start(input)
    res = await s.result(tid, timeout=5)
    return Ran(rt, store, sink, s, model, tid, res)


def boom_tool(exc: BaseException) -> Any:
    @tool("boom", "raises")
    def run(input: dict[str, Any], ctx: Any) -> Any:
        raise exc

    return run


# -- text and tool turns ---------------------------------------------------------------------


async def test_text_only_turn_streams_deltas_and_commits_one_model_step():
    text = "Hello there, how can I help?"
    ran = await run_turn([reply(text)])
    assert ran.result.status == TurnStatus.COMPLETED and ran.result.text == text
    assert await event_types(ran.store, ran.ref) == ["turn.started", "message.completed", "turn.completed"]
    assert len(delta_texts(ran.sink)) > 1 and "".join(delta_texts(ran.sink)) == text
    assert set(ran.store.steps(ran.turn_id)) == {"model:1"}
    assert roles(ran.store, ran.ref) == ["user", "assistant"]
    assert ran.sink.types() == await event_types(ran.store, ran.ref)  # published what was logged


async def test_two_tool_turn_steps_transcript_and_action_events():
    seen: list[int] = []

    @tool("add", "adds one", NUMBER)
    def add(input: dict[str, Any], ctx: Any) -> Any:
        seen.append(input["n"])
        return {"n": input["n"] + 1}

    ran = await run_turn([reply("working", ("add", {"n": 1}), ("add", {"n": 5})), reply("done")], add)
    assert ran.result.status == TurnStatus.COMPLETED and ran.result.text == "done"
    assert set(ran.store.steps(ran.turn_id)) == {"model:1", "tool:1:c0", "tool:1:c1", "model:4"}
    assert roles(ran.store, ran.ref) == ["user", "assistant", "tool", "tool", "assistant"]
    assert [(m.call_id, m.result, m.is_error) for m in ran.tool_messages()] == [
        ("c0", {"n": 2}, False),
        ("c1", {"n": 6}, False),
    ]
    assert seen == [1, 5]
    assert await event_types(ran.store, ran.ref) == [
        "turn.started",
        "message.completed",
        "action.requested",
        "action.requested",
        "action.completed",
        "action.completed",
        "message.completed",
        "turn.completed",
    ]
    requested = [e.call for e in await logged(ran.store, ran.ref, "action.requested")]
    completed = [(e.call_id, e.name, e.result, e.error) for e in await logged(ran.store, ran.ref, "action.completed")]
    assert requested == [{"id": "c0", "name": "add", "input": {"n": 1}}, {"id": "c1", "name": "add", "input": {"n": 5}}]
    assert completed == [("c0", "add", {"n": 2}, None), ("c1", "add", {"n": 6}, None)]
    # the second model call saw both results
    assert [str(m.role) for m in ran.model.requests[1].messages] == ["user", "assistant", "tool", "tool"]


# -- tool errors -----------------------------------------------------------------------------


async def test_tool_raising_value_error_is_an_error_result_and_the_turn_continues():
    ran = await run_turn([reply("", ("boom", {})), reply("recovered")], boom_tool(ValueError("boom")))
    assert ran.result.status == TurnStatus.COMPLETED and ran.result.text == "recovered"
    [msg] = ran.tool_messages()
    assert msg.result == {"error": "ValueError: boom"} and msg.is_error
    [done] = await logged(ran.store, ran.ref, "action.completed")
    assert done.error == "ValueError: boom" and done.result == {"error": "ValueError: boom"}
    assert ran.model.requests[1].messages[-1].is_error


async def test_plain_exception_has_no_class_prefix():
    ran = await run_turn([reply("", ("boom", {})), reply("ok")], boom_tool(Exception("plain trouble")))
    assert ran.tool_messages()[0].result == {"error": "plain trouble"}


async def test_tool_error_is_cut_to_2000_chars_and_carries_no_stack():
    ran = await run_turn([reply("", ("boom", {})), reply("ok")], boom_tool(RuntimeError("x" * 5000)))
    error = ran.tool_messages()[0].result["error"]
    assert len(error) == 2000 and error.startswith("RuntimeError: xxx")
    assert "Traceback" not in error and 'File "' not in error


async def test_fatal_tool_error_fails_the_turn_at_its_step():
    ran = await run_turn([reply("", ("boom", {})), reply("never")], boom_tool(FatalToolError("cannot go on")))
    assert ran.result.status == TurnStatus.FAILED
    [failed] = await logged(ran.store, ran.ref, "turn.failed")
    assert (failed.phase, failed.step) == ("tool", "tool:1:c0")
    assert "cannot go on" in failed.error
    assert ran.result.error["step"] == "tool:1:c0"
    assert ran.model.calls == 1 and ran.tool_messages() == []


async def test_fatal_tool_error_from_an_async_tool_fails_the_turn():
    @tool("remote", "fails hard")
    async def remote(input: dict[str, Any], ctx: Any) -> Any:
        raise FatalToolError("remote said no")

    ran = await run_turn([reply("", ("remote", {}))], remote)
    [failed] = await logged(ran.store, ran.ref, "turn.failed")
    assert ran.result.status == TurnStatus.FAILED and (failed.phase, failed.step) == ("tool", "tool:1:c0")


async def test_input_not_matching_the_schema_is_an_error_result_and_the_tool_does_not_run():
    ran_calls: list[Any] = []

    @tool("add", "adds", NUMBER)
    def add(input: dict[str, Any], ctx: Any) -> Any:
        ran_calls.append(input)
        return 0

    ran = await run_turn([reply("", ("add", {"n": "seven"})), reply("ok")], add)
    assert ran_calls == []
    [msg] = ran.tool_messages()
    assert msg.is_error and msg.result["error"].startswith("invalid input for add at n:")
    assert ran.result.status == TurnStatus.COMPLETED


async def test_unknown_tool_is_an_error_result():
    ran = await run_turn([reply("", ("x", {})), reply("ok")])
    [msg] = ran.tool_messages()
    assert msg.result == {"error": "unknown tool: x"} and msg.is_error
    assert ran.result.status == TurnStatus.COMPLETED


async def test_plain_def_returning_a_coroutine_fails_loudly_and_stores_nothing():
    """Regression: a plain ``def run`` that returned a coroutine was stored as ``{}``."""

    async def remote_work() -> int:
        return 1

    @tool("sneaky", "plain def returning an awaitable")
    def sneaky(input: dict[str, Any], ctx: Any) -> Any:
        return remote_work()

    ran = await run_turn([reply("", ("sneaky", {})), reply("never")], sneaky)
    assert ran.result.status == TurnStatus.FAILED
    [failed] = await logged(ran.store, ran.ref, "turn.failed")
    assert "async def" in failed.error and "sneaky" in failed.error and "ToolDeclarationError" in failed.error
    assert ran.tool_messages() == [] and "tool:1:c0" not in ran.store.steps(ran.turn_id)
    assert await logged(ran.store, ran.ref, "action.completed") == []


class Crash(BaseException):
    """Stands for the process dying."""


async def test_async_tool_idempotency_key_is_stable_across_a_replay():
    keys: list[str] = []

    @tool("charge", "remote")
    async def charge(input: dict[str, Any], ctx: Any) -> Any:
        keys.append(ctx.idempotency_key)
        if len(keys) == 1:
            raise Crash()
        return "charged"

    agent = Agent("a", "instr", tools=[charge])
    from agents_app.runtime import InMemorySessionStore

    store, clock = InMemorySessionStore(), FakeClock()
    model = ScriptedModel([reply("", ("charge", {})), reply("done")])
    ref = SessionRef("a", "s1")
    await store.create_turn(ref, TurnInput("pay"), turn_id="t1", policy=agent.policy_for(None))
    with pytest.raises(Crash):
        await make_executor(store, agent, model, clock).drive("t1")
    clock.advance(60)  # the dead attempt's lease expires
    assert await make_executor(store, agent, model, clock).drive("t1") == TurnStatus.COMPLETED
    assert keys == ["t1:c0", "t1:c0"]


# -- define_action ---------------------------------------------------------------------------


def test_define_action_builds_the_schema_from_type_hints():
    def lookup(
        name: str,
        count: int,
        ratio: float = 1.0,
        flag: bool = False,
        tags: list[str] | None = None,
        kind: Literal["a", "b"] = "a",
        note: str | None = None,
        ctx: Any = None,
    ) -> dict:
        """Look something up."""
        return {}

    t = define_action(lookup)
    assert t.name == "lookup" and t.spec.description == "Look something up." and not t.is_async
    assert t.spec.input_schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
            "kind": {"enum": ["a", "b"]},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "required": ["name", "count"],
        "additionalProperties": False,
    }


def test_define_action_keeps_async_and_takes_a_name():
    @define_action(name="fetch", description="fetches")
    async def fetch_it(url: str) -> str:
        return url

    assert fetch_it.is_async and fetch_it.name == "fetch" and fetch_it.spec.description == "fetches"
    assert fetch_it.spec.input_schema["required"] == ["url"]


async def test_define_action_gets_only_its_params_and_a_ctx_holding_only_user():
    got: list[Any] = []

    @define_action
    def greet(name: str, times: int = 1, ctx: Any = None) -> str:
        """Greets."""
        got.append((name, times, ctx))
        return f"hi {name}"

    @define_action
    async def shout(word: str) -> str:
        got.append(word)
        return word.upper()

    user = {"id": "u1", "name": "Ann", "attested": True}
    ran = await run_turn(
        [reply("", ("greet", {"name": "Bo"}), ("shout", {"word": "hey"})), reply("ok")],
        greet,
        shout,
        input=TurnInput("hello", user=user),
    )
    assert ran.result.status == TurnStatus.COMPLETED
    (name, times, ctx), word = got
    assert (name, times, word) == ("Bo", 1, "hey")
    assert ctx.user == user and type(ctx).__slots__ == ("user",)
    assert not hasattr(ctx, "store") and not hasattr(ctx, "turn_id")
    assert [m.result for m in ran.tool_messages()] == ["hi Bo", "HEY"]


async def test_require_handle_on_the_in_memory_store_fails_the_turn():
    @tool("orm", "needs the database")
    def orm(input: dict[str, Any], ctx: Any) -> Any:
        return require_handle(ctx)

    ran = await run_turn([reply("", ("orm", {})), reply("never")], orm)
    assert ran.result.status == TurnStatus.FAILED
    [failed] = await logged(ran.store, ran.ref, "turn.failed")
    assert failed.phase == "tool" and "transactional store handle" in failed.error


# -- model stops, usage, model errors ---------------------------------------------------------


@pytest.mark.parametrize("stop", [StopReason.MAX_TOKENS, StopReason.REFUSAL, StopReason.CONTENT_FILTER])
async def test_abnormal_stop_with_an_empty_reply_fails_the_model_step(stop):
    ran = await run_turn([reply("", stop=stop)])
    assert ran.result.status == TurnStatus.FAILED
    [failed] = await logged(ran.store, ran.ref, "turn.failed")
    assert (failed.phase, failed.step) == ("model", "model:1") and str(stop) in failed.error
    assert roles(ran.store, ran.ref) == ["user"]
    assert "model:1" not in ran.store.steps(ran.turn_id)


async def test_max_tokens_with_text_commits_and_completes():
    ran = await run_turn([reply("a partial answer", stop=StopReason.MAX_TOKENS)])
    assert ran.result.status == TurnStatus.COMPLETED and ran.result.text == "a partial answer"
    assert roles(ran.store, ran.ref) == ["user", "assistant"]


async def test_usage_is_summed_on_the_turn_record():
    @tool("noop", "nothing")
    def noop(input: dict[str, Any], ctx: Any) -> Any:
        return None

    ran = await run_turn(
        [
            reply("", ("noop", {}), usage={"input_tokens": 10, "output_tokens": 3}),
            reply("done", usage={"input_tokens": 25, "output_tokens": 7}),
        ],
        noop,
    )
    rec = await ran.store.get_turn(ran.turn_id)
    assert rec.usage == {"input_tokens": 35, "output_tokens": 10, "model_calls": 2}
    assert [m.usage for m in ran.transcript if m.role == "assistant"] == [
        {"input_tokens": 10, "output_tokens": 3},
        {"input_tokens": 25, "output_tokens": 7},
    ]


async def test_retryable_model_error_is_retried_by_the_executor():
    ran = await run_turn([ModelError("overloaded", retryable=True), reply("fine now")])
    assert ran.result.status == TurnStatus.COMPLETED and ran.result.text == "fine now"
    assert ran.model.calls == 2
    assert (await ran.store.get_turn(ran.turn_id)).attempts == 2
    assert await event_types(ran.store, ran.ref) == ["turn.started", "message.completed", "turn.completed"]
    assert roles(ran.store, ran.ref) == ["user", "assistant"]


async def test_non_retryable_model_error_fails_the_turn():
    ran = await run_turn([ModelError("bad request", retryable=False), reply("never")])
    assert ran.result.status == TurnStatus.FAILED and ran.model.calls == 1
    [failed] = await logged(ran.store, ran.ref, "turn.failed")
    assert (failed.error, failed.phase, failed.step) == ("bad request", "model", "model:1")


class _SettleSpy:
    """A unit's Tx that records the statuses the unit settles its turn in."""

    def __init__(self, tx: Any, settled: list[str]) -> None:
        self._tx, self._settled = tx, settled

    def settle(self, status: TurnStatus, **kw: Any) -> None:
        self._settled.append(str(status))
        self._tx.settle(status, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


@pytest.mark.parametrize("claimed", [True, False])
async def test_the_opening_makes_a_turn_running_unless_its_claim_did(claimed: bool):
    """An attempt's claim made the turn (and its session) running: its opening unit settles no
    status again (on SQLite the status is in two of the turn's indexes, and the session's status
    recompute stamps a third). A turn run without a claim is made running by its opening."""
    from agents_app.runtime import InMemorySessionStore, TurnLoop

    agent, store, settled = Agent("a", "instr"), InMemorySessionStore(), []
    commit = store.commit

    async def spied(turn_id: str, attempt_id: str | None, record: Any) -> Any:
        return await commit(turn_id, attempt_id, lambda tx: record(_SettleSpy(tx, settled)))

    store.commit = spied  # type: ignore[method-assign]
    await store.create_turn(SessionRef("a", "s"), TurnInput(text="hi"), turn_id="t1")
    if claimed:
        status = await make_executor(store, agent, ScriptedModel([reply("done")]), FakeClock()).drive("t1")
    else:
        status = await TurnLoop(
            agent=agent, store=store, sink=RecordingSink(), model=ScriptedModel([reply("done")])
        ).run("t1", None)
    assert status == TurnStatus.COMPLETED
    assert settled == (["completed"] if claimed else ["running", "completed"])
