"""AnthropicModel against a local fake of the Messages API: what it yields, and what the API got.

Every test goes through the official SDK and a real socket; no network, no real sleeping (the
provider's ``sleep`` is a recorder).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import pytest

from agents_app.providers import long_lived_loop
from agents_app.providers.anthropic import (
    MAX_RETRY_AFTER,
    AnthropicModel,
    from_settings,
    map_stop_reason,
)
from agents_app.providers.anthropic_request import build_messages
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.messages import Message, Role, ToolCall
from agents_app.runtime.model import (
    ModelError,
    ModelReply,
    ModelRequest,
    ReasoningDelta,
    StopReason,
    TextDelta,
    ToolSpec,
)

from .fake_messages_api import Disconnect, FakeMessagesAPI, HTTPError, StreamBuilder

TOOLS = (
    ToolSpec("get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}}),
    ToolSpec("get_time", "Local time in a timezone", {"type": "object", "properties": {"tz": {"type": "string"}}}),
)


@pytest.fixture
def api():
    with FakeMessagesAPI() as server:
        yield server
        assert server.unscripted == 0, "the provider made a request nobody scripted"


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture(params=["httpx", "aiohttp"])
async def make_model(request, api, sleeps):
    """Models on the SDK's default transport (a loop that runs a turn and ends), and on its
    aiohttp transport (a worker's runner: ``providers.long_lived_loop``): every test, both."""

    async def record_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    made: list[AnthropicModel] = []

    def make(**kwargs: Any) -> AnthropicModel:
        made.append(AnthropicModel(api_key="test-key", base_url=api.base_url, sleep=record_sleep, **kwargs))
        assert ("aiohttp" in type(made[-1]._client._client).__name__.lower()) == (request.param == "aiohttp")
        return made[-1]

    async with contextlib.AsyncExitStack() as stack:
        if request.param == "aiohttp":
            await stack.enter_async_context(long_lived_loop())
        yield make
        for model in made:
            await model.aclose()


def request(*messages: Message, tools=TOOLS, system: str = "You are terse.") -> ModelRequest:
    return ModelRequest(system=system, messages=tuple(messages), tools=tools)


async def collect(model: AnthropicModel, req: ModelRequest) -> tuple[list[Any], ModelError | None]:
    chunks: list[Any] = []
    try:
        async for chunk in model.stream(req):
            chunks.append(chunk)
    except ModelError as exc:
        return chunks, exc
    return chunks, None


def final(chunks: list[Any]) -> ModelReply:
    assert isinstance(chunks[-1], ModelReply)
    assert sum(isinstance(c, ModelReply) for c in chunks) == 1
    return chunks[-1]


def user(text: str) -> Message:
    return Message(Role.USER, text=text)


def assistant_from(reply: ModelReply) -> Message:
    """The assistant message the engine stores for a reply."""
    return Message(Role.ASSISTANT, text=reply.text, tool_calls=reply.tool_calls, blocks=reply.blocks)


# --- tool use --------------------------------------------------------------------------------


async def test_two_tool_turn_round_trips_tool_use_and_merges_both_results(api, make_model):
    api.script(
        StreamBuilder(input_tokens=50)
        .text("Let me ", "check.")
        .tool_use("toolu_1", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}'])
        .tool_use("toolu_2", "get_time", ["", '{"tz":', ' "Europe/Paris"', "}"])
        .done("tool_use", output_tokens=40),
        StreamBuilder(input_tokens=90).text("Sunny, 14:00.").done("end_turn", output_tokens=8),
    )
    model = make_model()

    chunks, error = await collect(model, request(user("Weather and time in Paris?")))
    assert error is None
    assert [c for c in chunks if isinstance(c, TextDelta)] == [TextDelta("Let me "), TextDelta("check.")]
    reply = final(chunks)
    assert reply.stop_reason == StopReason.TOOL_USE
    assert reply.text == "Let me check."
    assert reply.tool_calls == (
        ToolCall("toolu_1", "get_weather", {"city": "Paris"}),
        ToolCall("toolu_2", "get_time", {"tz": "Europe/Paris"}),
    )
    assert reply.blocks == (
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "Europe/Paris"}},
    )
    assert reply.usage == {
        "input_tokens": 50,
        "output_tokens": 40,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }

    first = api.bodies[0]
    assert first["stream"] is True
    assert first["model"] == "claude-sonnet-4-6" and first["max_tokens"] == 4096
    assert first["system"] == "You are terse."
    assert first["tools"] == [t.to_json() for t in TOOLS]
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]}]
    assert "thinking" not in first and "temperature" not in first
    assert api.requests[0].path == "/v1/messages"
    assert (
        api.requests[0].headers.get("authorization") == "Bearer test-key"
        or api.requests[0].headers.get("x-api-key") == "test-key"
    )

    transcript = (
        user("Weather and time in Paris?"),
        assistant_from(reply),
        Message(Role.TOOL, call_id="toolu_1", name="get_weather", result={"sky": "sunny"}),
        Message(Role.TOOL, call_id="toolu_2", name="get_time", result="14:00"),
    )
    chunks, error = await collect(model, request(*transcript))
    assert error is None and final(chunks).text == "Sunny, 14:00."
    assert final(chunks).stop_reason == StopReason.END_TURN

    assert len(api.requests) == 2
    assert api.bodies[1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
        {"role": "assistant", "content": list(reply.blocks)},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"sky": "sunny"}'},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "14:00"},
            ],
        },
    ]


async def test_error_tool_result_is_sent_with_is_error(api, make_model):
    api.script(StreamBuilder().text("The lookup failed.").done())
    transcript = (
        user("Weather?"),
        Message(Role.ASSISTANT, tool_calls=(ToolCall("toolu_9", "get_weather", {"city": "Atlantis"}),)),
        Message(
            Role.TOOL,
            call_id="toolu_9",
            name="get_weather",
            result={"error": "LookupError: no such city"},
            is_error=True,
        ),
    )
    chunks, error = await collect(make_model(), request(*transcript))
    assert error is None and final(chunks).text == "The lookup failed."
    assert api.bodies[0]["messages"][1:] == [
        # no blocks stored: the assistant message is rebuilt from its tool calls
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Atlantis"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_9",
                    "content": '{"error": "LookupError: no such city"}',
                    "is_error": True,
                }
            ],
        },
    ]


# --- thinking --------------------------------------------------------------------------------

SIGNATURE = "EqQBCkYIBxgCKkBx+/9zQk1hZ3N0cm9uZ0F+Ym9vaw==/end+sig=="
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP=="


async def test_thinking_and_redacted_thinking_round_trip_unchanged(api, make_model):
    api.script(
        StreamBuilder()
        .thinking(["The user wants ", "the weather."], SIGNATURE)
        .redacted_thinking(REDACTED)
        .tool_use("toolu_1", "get_weather", ['{"city": "Oslo"}'])
        .done("tool_use"),
        StreamBuilder().text("Cold.").done(),
    )
    model = make_model(max_tokens=8000, thinking_budget=2048)
    chunks, error = await collect(model, request(user("Oslo?")))
    assert error is None
    assert [c for c in chunks if isinstance(c, ReasoningDelta)] == [
        ReasoningDelta("The user wants "),
        ReasoningDelta("the weather."),
    ]
    reply = final(chunks)
    assert reply.blocks[:2] == (
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
    )
    assert reply.text == "" and reply.tool_calls == (ToolCall("toolu_1", "get_weather", {"city": "Oslo"}),)
    assert api.bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert api.bodies[0]["max_tokens"] == 8000

    transcript = (
        user("Oslo?"),
        assistant_from(reply),
        Message(Role.TOOL, call_id="toolu_1", name="get_weather", result={"c": -3}),
    )
    chunks, error = await collect(model, request(*transcript))
    assert error is None
    sent = api.bodies[1]["messages"][1]
    assert sent == {"role": "assistant", "content": list(reply.blocks)}
    assert sent["content"][0]["signature"] == SIGNATURE
    assert sent["content"][1]["data"] == REDACTED
    # byte-for-byte on the wire, not merely equal after decoding
    assert SIGNATURE.encode() in api.requests[1].raw and REDACTED.encode() in api.requests[1].raw


# --- errors and retries ----------------------------------------------------------------------


async def test_overloaded_error_mid_stream_raises_retryable_without_retrying(api, make_model, sleeps):
    api.script(StreamBuilder().partial_text("Hel", "lo").error("overloaded_error", "Overloaded"))
    chunks, error = await collect(make_model(), request(user("hi")))
    assert chunks == [TextDelta("Hel"), TextDelta("lo")]
    assert error is not None and error.retryable
    assert "overloaded_error" in str(error) and "Overloaded" in str(error)
    assert len(api.requests) == 1 and sleeps == []


async def test_error_event_before_any_delta_is_retried(api, make_model, sleeps):
    api.script(StreamBuilder().error("overloaded_error", "Overloaded"), StreamBuilder().text("ok").done())
    chunks, error = await collect(make_model(), request(user("hi")))
    assert error is None and final(chunks).text == "ok"
    assert len(api.requests) == 2 and len(sleeps) == 1


async def test_rate_limit_honours_retry_after(api, make_model, sleeps):
    api.script(
        HTTPError(
            429, "rate_limit_error", "Number of requests has exceeded your rate limit", headers={"retry-after": "2"}
        ),
        StreamBuilder().text("ok").done(),
    )
    chunks, error = await collect(make_model(), request(user("hi")))
    assert error is None and final(chunks).text == "ok"
    assert sleeps == [pytest.approx(2.0)]
    assert len(api.requests) == 2 and api.bodies[0] == api.bodies[1]


async def test_retry_after_is_capped(api, make_model, sleeps):
    api.script(
        HTTPError(429, "rate_limit_error", "slow down", headers={"retry-after": "3600"}),
        StreamBuilder().text("ok").done(),
    )
    _, error = await collect(make_model(), request(user("hi")))
    assert error is None and sleeps == [MAX_RETRY_AFTER]


async def test_overloaded_529_and_500_are_retried_with_backoff(api, make_model, sleeps):
    api.script(
        HTTPError(529, "overloaded_error", "Overloaded"),
        HTTPError(500, "api_error", "Internal server error"),
        StreamBuilder().text("finally").done(),
    )
    chunks, error = await collect(make_model(), request(user("hi")))
    assert error is None and final(chunks).text == "finally"
    assert len(api.requests) == 3
    assert len(sleeps) == 2 and 0 < sleeps[0] <= 0.5 and 0 < sleeps[1] <= 1.0 and sleeps[1] > sleeps[0] * 0.75


async def test_retries_are_bounded(api, make_model, sleeps):
    api.script(*[HTTPError(529, "overloaded_error", "Overloaded")] * 3)
    chunks, error = await collect(make_model(max_retries=2), request(user("hi")))
    assert chunks == [] and error is not None and error.retryable
    assert "overloaded_error (529): Overloaded" in str(error) and "3 attempts" in str(error)
    assert len(api.requests) == 3 and len(sleeps) == 2


async def test_dropped_connection_is_retried(api, make_model, sleeps):
    api.script(Disconnect(), StreamBuilder().text("ok").done())
    chunks, error = await collect(make_model(), request(user("hi")))
    assert error is None and final(chunks).text == "ok"
    assert len(api.requests) == 2 and len(sleeps) == 1


async def test_stream_cut_after_deltas_is_a_retryable_error(api, make_model, sleeps):
    api.script(StreamBuilder().partial_text("half a thou").truncated())
    chunks, error = await collect(make_model(), request(user("hi")))
    assert chunks == [TextDelta("half a thou")]
    assert error is not None and error.retryable and "message_stop" in str(error)
    assert len(api.requests) == 1 and sleeps == []


@pytest.mark.parametrize(
    "status,etype,message",
    [
        (401, "authentication_error", "invalid x-api-key"),
        (403, "permission_error", "Your API key does not have permission to use the specified resource."),
        (404, "not_found_error", "model: claude-nope"),
        (400, "invalid_request_error", 'messages: roles must alternate between "user" and "assistant"'),
    ],
)
async def test_client_errors_are_not_retried_and_say_why(api, make_model, sleeps, status, etype, message):
    api.script(HTTPError(status, etype, message))
    chunks, error = await collect(make_model(), request(user("hi")))
    assert chunks == [] and error is not None and not error.retryable
    assert str(error) == f"Anthropic API {etype} ({status}): {message}"
    assert len(api.requests) == 1 and sleeps == []


async def test_missing_api_key_is_a_clear_error(monkeypatch, sleeps):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    model = AnthropicModel(base_url="http://127.0.0.1:9")
    _, error = await collect(model, request(user("hi")))
    await model.aclose()
    assert error is not None and not error.retryable and "ANTHROPIC_API_KEY" in str(error)


# --- stop reasons ----------------------------------------------------------------------------


async def test_prompt_too_long_is_a_context_overflow_reply(api, make_model, sleeps):
    api.script(HTTPError(400, "invalid_request_error", "prompt is too long: 212345 tokens > 200000 maximum"))
    chunks, error = await collect(make_model(), request(user("a very long story")))
    assert error is None
    assert chunks == [ModelReply(stop_reason=StopReason.CONTEXT_OVERFLOW)]
    assert len(api.requests) == 1 and sleeps == []


async def test_context_window_exceeded_stop_is_an_empty_overflow_reply(api, make_model):
    api.script(StreamBuilder().text("and then").done("model_context_window_exceeded"))
    chunks, error = await collect(make_model(), request(user("go on")))
    assert error is None
    reply = final(chunks)
    assert reply.stop_reason == StopReason.CONTEXT_OVERFLOW and reply.is_empty and reply.blocks == ()


async def test_max_tokens_with_content_keeps_the_text(api, make_model):
    api.script(StreamBuilder().text("The answer is").done("max_tokens"))
    reply = final((await collect(make_model(), request(user("hi"))))[0])
    assert reply.stop_reason == StopReason.MAX_TOKENS and reply.text == "The answer is"


async def test_max_tokens_without_content_is_an_empty_reply(api, make_model):
    api.script(StreamBuilder().thinking(["mulling"], "sig").done("max_tokens"))
    reply = final((await collect(make_model(), request(user("hi"))))[0])
    assert reply.stop_reason == StopReason.MAX_TOKENS and reply.is_empty


@pytest.mark.parametrize(
    "raw,has_content,expected",
    [
        ("end_turn", True, StopReason.END_TURN),
        ("tool_use", True, StopReason.TOOL_USE),
        ("stop_sequence", True, StopReason.STOP_SEQUENCE),
        ("refusal", False, StopReason.REFUSAL),
        ("pause_turn", False, StopReason.PAUSE_TURN),
        ("max_tokens", False, StopReason.MAX_TOKENS),
        ("model_context_window_exceeded", False, StopReason.CONTEXT_OVERFLOW),
        ("brand_new_reason", True, StopReason.END_TURN),
        ("brand_new_reason", False, StopReason.ERROR),
        (None, False, StopReason.ERROR),
    ],
)
def test_stop_reason_table(raw, has_content, expected):
    assert map_stop_reason(raw, has_content) == expected


async def test_usage_is_recorded_with_cache_counts(api, make_model):
    api.script(
        StreamBuilder(input_tokens=5, cache_creation_input_tokens=100, cache_read_input_tokens=2000)
        .text("hi")
        .done(output_tokens=3, cache_read_input_tokens=2048)
    )
    reply = final((await collect(make_model(), request(user("hi"))))[0])
    # message_delta usage is cumulative: it overwrites what it carries, keeps the rest
    assert reply.usage == {
        "input_tokens": 5,
        "output_tokens": 3,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2048,
    }


# --- request building ------------------------------------------------------------------------


async def test_trigger_is_sent_as_user_and_consecutive_users_merge(api, make_model):
    api.script(StreamBuilder().text("Morning!").done())
    transcript = (
        user("hello"),
        Message(Role.ASSISTANT, text="Hi."),
        Message(Role.ASSISTANT),  # empty: skipped, not sent
        user("one"),
        user("two"),
        Message(Role.TRIGGER, text="[schedule] daily check-in", by="scheduler"),
    )
    _, error = await collect(make_model(), request(*transcript, tools=(), system=""))
    assert error is None
    body = api.bodies[0]
    assert "tools" not in body and "system" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two"},
                {"type": "text", "text": "[schedule] daily check-in"},
            ],
        },
    ]


def test_build_messages_does_not_mutate_stored_blocks():
    blocks = ({"type": "text", "text": "a"},)
    sent = build_messages([user("x"), Message(Role.ASSISTANT, text="a", blocks=blocks), user("y")])
    sent[1]["content"][0]["text"] = "changed"
    assert blocks[0]["text"] == "a"


async def test_settings_reach_the_request(api, sleeps, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", api.base_url)
    api.script(StreamBuilder().text("ok").done())
    model = from_settings({"provider": "anthropic", "model": "claude-haiku-4-5", "max_tokens": 512, "temperature": 0.2})
    _, error = await collect(model, request(user("hi")))
    await model.aclose()
    assert error is None
    body = api.bodies[0]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("claude-haiku-4-5", 512, 0.2)
    assert "env-key" in (
        api.requests[0].headers.get("x-api-key"),
        api.requests[0].headers.get("authorization", "").removeprefix("Bearer "),
    )


@pytest.mark.parametrize(
    "config",
    [
        {"modle": "claude-haiku-4-5"},
        {"max_tokens": 0},
        {"thinking_budget": 512},
        {"max_tokens": 2048, "thinking_budget": 4096},
        {"temperature": "hot"},
    ],
)
def test_bad_settings_are_refused(config):
    with pytest.raises(AgentConfigError):
        from_settings(config)


# --- end to end through the engine ---------------------------------------------------------


async def test_two_tool_turn_through_the_engine(api, make_model):
    """A whole turn: AnthropicModel on the fake API, driven by the engine on the in-memory store."""
    from agents_app.runtime import Agent, InMemorySessionStore, Runtime, TurnStatus, tool

    @tool("get_weather", "Weather for a city", TOOLS[0].input_schema)
    def get_weather(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"city": input["city"], "sky": "sunny"}

    @tool("get_time", "Local time in a timezone", TOOLS[1].input_schema)
    def get_time(input: dict[str, Any], ctx: Any) -> str:
        raise LookupError(f"unknown timezone {input['tz']}")

    api.script(
        StreamBuilder()
        .thinking(["Two lookups."], SIGNATURE)
        .text("Checking.")
        .tool_use("toolu_1", "get_weather", ['{"city"', ': "Paris"}'])
        .tool_use("toolu_2", "get_time", ['{"tz": "Mars/', 'Olympus"}'])
        .done("tool_use"),
        StreamBuilder().text("Sunny; the time lookup failed.").done("end_turn"),
    )
    model = make_model(max_tokens=8000, thinking_budget=2048)
    store = InMemorySessionStore()
    agent = Agent(name="weather", instructions="You are terse.", tools=[get_weather, get_time])
    runtime = Runtime(store=store, agents={"weather": agent}, model_for=lambda _agent: model)
    session = runtime.session("weather", "s1")

    result = await session.turn("Weather and time in Paris?", timeout=10)
    await runtime.dispatcher.idle()

    assert result.status == TurnStatus.COMPLETED, result.error
    assert result.text == "Sunny; the time lookup failed."
    transcript = store.transcript(session.ref)
    assert [m.role for m in transcript] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.TOOL, Role.ASSISTANT]
    first = transcript[1]
    assert first.blocks == (
        {"type": "thinking", "thinking": "Two lookups.", "signature": SIGNATURE},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "Mars/Olympus"}},
    )
    assert [c.id for c in first.tool_calls] == ["toolu_1", "toolu_2"]
    weather, clock = transcript[2], transcript[3]
    assert (weather.call_id, weather.result, weather.is_error) == ("toolu_1", {"city": "Paris", "sky": "sunny"}, False)
    assert (clock.call_id, clock.is_error) == ("toolu_2", True)
    assert clock.result == {"error": "LookupError: unknown timezone Mars/Olympus"}

    assert len(api.requests) == 2
    assert api.bodies[0]["system"] == "You are terse."
    assert {t["name"] for t in api.bodies[0]["tools"]} == {"get_weather", "get_time"}
    assert api.bodies[1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather and time in Paris?"}]},
        {"role": "assistant", "content": list(first.blocks)},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"city": "Paris", "sky": "sunny"}'},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": '{"error": "LookupError: unknown timezone Mars/Olympus"}',
                    "is_error": True,
                },
            ],
        },
    ]


# --- compaction ------------------------------------------------------------------------------


def test_a_summary_is_user_text_merged_with_the_user_message_after_it():
    summary = Message(Role.SUMMARY, text="they ordered tea", boundary=3)
    assert build_messages([summary, Message(Role.USER, text="and now?")]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[Summary of the earlier conversation]\nthey ordered tea"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]


async def test_request_too_large_is_a_context_overflow_reply(api, make_model, sleeps):
    api.script(HTTPError(413, "request_too_large", "Request exceeds the maximum allowed number of bytes"))
    chunks, error = await collect(make_model(), request(user("a very long story")))
    assert error is None and chunks == [ModelReply(stop_reason=StopReason.CONTEXT_OVERFLOW)] and sleeps == []


def test_context_window_and_server_compaction_settings():
    model = from_settings({"context_window": 1_000_000, "server_compaction": {"trigger": 150_000}})
    assert model.context_window == 1_000_000 and model.server_compaction == {"trigger": 150_000}
    assert from_settings({}).context_window == 200_000 and from_settings({}).server_compaction is None
    assert from_settings({"server_compaction": True}).server_compaction == {}
    for bad in (
        {"context_window": 10},
        {"server_compaction": {"pause_after_compaction": True}},
        {"server_compaction": {"trigger": -1}},
        {"server_compaction": "yes"},
    ):
        with pytest.raises(AgentConfigError):
            from_settings(bad)


def _engine(model, **agent_kw):
    from agents_app.runtime import Agent, InMemorySessionStore, Runtime

    store = InMemorySessionStore()
    agent = Agent(name="a", instructions="You are terse.", **agent_kw)
    runtime = Runtime(store=store, agents={"a": agent}, model_for=lambda _agent: model)
    return store, runtime.session("a", "s1")


@pytest.mark.parametrize("overflow", ["prompt_too_long", "stop_reason"])
async def test_overflow_compacts_through_the_engine(api, make_model, overflow):
    """Reactive compaction on the real provider: the overflowed step is summarized with no
    tools and the summarizing instruction, then redone over the summary and the tail."""
    from agents_app.runtime import TurnStatus

    too_long = (
        HTTPError(400, "invalid_request_error", "prompt is too long: 212345 tokens > 200000 maximum")
        if overflow == "prompt_too_long"
        else StreamBuilder().done("model_context_window_exceeded")
    )
    api.script(
        StreamBuilder().text("Hello.").done("end_turn"),
        too_long,
        StreamBuilder().text("The user said hello; the assistant greeted them.").done("end_turn"),
        StreamBuilder().text("Still here.").done("end_turn"),
    )
    store, session = _engine(make_model(), compaction={"keep_last": 1})
    assert (await session.turn("hello", timeout=10)).status == TurnStatus.COMPLETED
    result = await session.turn("are you there?", timeout=10)
    assert result.status == TurnStatus.COMPLETED and result.text == "Still here."
    summarize, redo = api.bodies[2], api.bodies[3]
    assert "tools" not in summarize and summarize["system"].startswith("You maintain the memory")
    assert summarize["messages"][0]["content"][0]["text"] == "User: hello\n\nAssistant: Hello."
    assert redo["system"] == "You are terse."
    assert redo["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "[Summary of the earlier conversation]\nThe user said hello; the assistant greeted them.",
                },
                {"type": "text", "text": "are you there?"},
            ],
        }
    ]
    assert [m.role for m in store.transcript(session.ref)] == [
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.SUMMARY,
        Role.ASSISTANT,
    ]


async def test_server_side_compaction_blocks_round_trip_byte_for_byte(api, make_model):
    from agents_app.runtime import TurnStatus

    encrypted = "Zm9vYmFy+/==" + "x" * 64
    api.script(
        StreamBuilder()
        .compaction("Earlier: they talked about tea.", encrypted, signature="sig-42")
        .text("Noted.")
        .done("end_turn"),
        StreamBuilder().text("Yes.").done("end_turn"),
    )
    store, session = _engine(make_model(server_compaction={"trigger": 50_000}))
    assert (await session.turn("remember tea", timeout=10)).status == TurnStatus.COMPLETED
    assert (await session.turn("tea?", timeout=10)).status == TurnStatus.COMPLETED
    first, second = api.requests
    assert first.body["context_management"] == {
        "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]
    }
    assert "compact-2026-01-12" in first.headers.get("anthropic-beta", "")
    stored = store.transcript(session.ref)[1].blocks[0]
    assert stored == {
        "type": "compaction",
        "content": "Earlier: they talked about tea.",
        "encrypted_content": encrypted,
        "signature": "sig-42",
    }
    sent = second.body["messages"][1]["content"][0]
    assert sent == stored
    # byte for byte: every field, in the order the API sent them, is in the next request's raw body
    assert json.dumps(stored, separators=(",", ":")).encode() in second.raw


async def test_models_made_on_one_loop_share_one_sdk_client():
    """A model is made per attempt, and a worker's runner drives hundreds of turns on one loop:
    a client each (a connection pool and a TLS context each) cost CPU on the loop and memory.
    Models with the same key, base URL and timeout share one; another base URL gets its own."""
    from agents_app.providers.anthropic import AnthropicModel

    a = AnthropicModel(api_key="k", base_url="http://127.0.0.1:9/a")
    b = AnthropicModel(api_key="k", base_url="http://127.0.0.1:9/a")
    c = AnthropicModel(api_key="k", base_url="http://127.0.0.1:9/c")
    assert a._client is b._client and a._client is not c._client


async def test_the_sdks_own_spans_are_off_unless_its_variables_ask_for_them(monkeypatch):
    """June has its own ``chat`` span per model call; the SDK's would be a second, and the SDK
    works out their attributes on every request even when nothing records them. Off by
    default; an ``ANTHROPIC_OPEN_TELEMETRY*`` variable leaves the SDK to read its variables."""
    for name in [n for n in os.environ if n.startswith("ANTHROPIC_OPEN_TELEMETRY")]:
        monkeypatch.delenv(name)
    off = AnthropicModel(api_key="k", base_url="http://127.0.0.1:9/spans-off")._client
    assert off.open_telemetry["traces"]["enabled"] is False
    monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE", "content")
    on = AnthropicModel(api_key="k", base_url="http://127.0.0.1:9/spans-on")._client
    assert on.open_telemetry["traces"] == {"enabled": True, "content_mode": "content", "max_content_bytes": 750_000}


def test_a_last_call_at_a_limit_keeps_the_tools_and_allows_none():
    """A turn's last model call at its limit (runtime.limits): the transcript's tool calls need
    the tools defined, and ``tool_choice`` none keeps the model from calling one."""
    from agents_app.providers.anthropic import AnthropicModel
    from agents_app.runtime.model import ModelRequest, ToolSpec

    model = AnthropicModel(api_key="k", base_url="http://127.0.0.1:9")
    tools = (ToolSpec("probe", "Look.", {"type": "object", "properties": {}}),)
    free = model.params(ModelRequest(system="s", messages=(), tools=tools))
    last = model.params(ModelRequest(system="s", messages=(), tools=tools, tools_allowed=False))
    assert "tool_choice" not in free
    assert last["tool_choice"] == {"type": "none"} and [t["name"] for t in last["tools"]] == ["probe"]


async def test_a_model_that_keeps_calling_a_tool_stops_at_the_limit_with_an_answer(api, make_model):
    """Issue 37, through the real SDK: a model that always calls a tool ends at ``model_calls``
    — its last request carries ``tool_choice`` none and its text completes the turn, marked."""
    from agents_app.runtime import Agent, InMemorySessionStore, Runtime, TurnStatus, tool
    from agents_app.runtime.limits import Limits

    @tool("get_weather", "Weather for a city", TOOLS[0].input_schema)
    def get_weather(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"city": input["city"], "sky": "grey"}

    api.script(
        *[
            StreamBuilder()
            .text(f"Looking ({n}).")
            .tool_use(f"toolu_{n}", "get_weather", ['{"city": "Oslo"}'])
            .done("tool_use")
            for n in range(4)
        ],
        StreamBuilder().text("Best I can say: grey in Oslo.").done("end_turn"),
    )
    model = make_model()
    store = InMemorySessionStore()
    agent = Agent(name="weather", instructions="You are terse.", tools=[get_weather], limits=Limits(model_calls=5))
    runtime = Runtime(store=store, agents={"weather": agent}, model_for=lambda _agent: model)
    session = runtime.session("weather", "s1")
    result = await session.turn("Weather in Oslo, again and again?", timeout=10)
    await runtime.dispatcher.idle()
    assert result.status == TurnStatus.COMPLETED, result.error
    assert result.text == "Best I can say: grey in Oslo."
    assert len(api.requests) == 5
    assert ["tool_choice" in b for b in api.bodies] == [False] * 4 + [True]
    assert api.bodies[-1]["tool_choice"] == {"type": "none"} and "limit of 5 model calls" in api.bodies[-1]["system"]
    turn = await store.get_turn(result.turn_id)
    assert turn.usage["limited"] == "model_calls" and turn.usage["model_calls"] == 5


def test_a_persons_reply_during_a_takeover_reads_as_theirs():
    """A reply a person wrote while they had the session (``by = "person:<name>"``) is sent
    as the assistant's turn, saying who wrote it: the model does not take it for its own."""
    out = build_messages(
        [
            Message(Role.USER, text="a human please"),
            Message(Role.ASSISTANT, text="Olga here: refunded.", by="person:Olga Ops"),
            Message(Role.USER, text="thanks"),
        ]
    )
    assert out[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "[Olga Ops, a person, wrote:] Olga here: refunded."}],
    }
