"""Claude on Vertex AI and AWS Bedrock through the SDK's own clients, and a fallback list over
providers, against local peers speaking each platform's wire format (``fake_messages_api``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agents_app.providers import claude_models
from agents_app.providers.anthropic import AnthropicModel
from agents_app.providers.fallback import Breaker, Candidate, FallbackModel, claude_model
from agents_app.runtime.agent import Agent
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.messages import Message, Role, ToolCall
from agents_app.runtime.model import ModelError, ModelReply, ModelRequest, TextDelta, ToolSpec
from agents_app.runtime.tools import tool
from tests.unit._support import make_runtime

from .fake_messages_api import FakeMessagesAPI, HTTPError, StreamBuilder

TOOLS = (ToolSpec("get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}}),)
ASK = ModelRequest(system="be brief", messages=(Message(Role.USER, text="hi"),), tools=TOOLS)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "providers.md"
PLACE = {"vertex": {"region": "us-east5", "project_id": "proj-1"}, "bedrock": {"region": "us-west-2"}}


@pytest.fixture
def api():
    with FakeMessagesAPI() as server:
        yield server
        assert server.unscripted == 0, "the provider made a request nobody scripted"


@pytest.fixture
def aws(monkeypatch):
    """Credentials for Bedrock's signature (AWS's own variables, read by boto3)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def model(platform: str, api: FakeMessagesAPI, **kw: Any) -> AnthropicModel:
    token = {"anthropic": "sk-test", "vertex": "ya29.test-token", "bedrock": None}[platform]
    options: dict[str, Any] = {"api_key": token, "base_url": api.base_url, "sleep": _no_sleep, "max_retries": 1}
    return AnthropicModel(platform=platform, place=PLACE.get(platform), **{**options, **kw})


async def _no_sleep(seconds: float) -> None:
    return None


async def collect(m: Any, request: ModelRequest = ASK) -> tuple[list[str], ModelReply]:
    deltas, reply = [], None
    async for chunk in m.stream(request):
        if isinstance(chunk, TextDelta):
            deltas.append(chunk.text)
        elif isinstance(chunk, ModelReply):
            reply = chunk
    assert reply is not None
    return deltas, reply


async def test_vertex_streams_through_stream_raw_predict(api):
    api.script(
        StreamBuilder().text("Hel", "lo").tool_use("tu_1", "get_weather", ['{"city":', '"Oslo"}']).done("tool_use")
    )
    deltas, reply = await collect(model("vertex", api, model="claude-sonnet-4-6"))
    assert deltas == ["Hel", "lo"]
    assert reply.tool_calls == (ToolCall("tu_1", "get_weather", {"city": "Oslo"}),)
    assert reply.served_by == "vertex:claude-sonnet-4-6"
    (got,) = api.requests
    assert got.platform == "vertex" and got.model == "claude-sonnet-4-6"
    assert got.path.startswith("/projects/proj-1/locations/us-east5/")
    assert "model" not in got.body and "anthropic_version" in got.body
    assert got.headers["authorization"] == "Bearer ya29.test-token"
    assert got.body["tools"][0]["name"] == "get_weather"


async def test_bedrock_streams_aws_event_stream_signed_with_sigv4(api, aws):
    api.script(StreamBuilder().thinking(["let me", " see"], "sig-1").text("Sunny").done("end_turn", output_tokens=7))
    deltas, reply = await collect(model("bedrock", api, model="anthropic.claude-sonnet-4-6", thinking_budget=1024))
    assert deltas == ["Sunny"]
    assert reply.text == "Sunny" and reply.usage["output_tokens"] == 7
    assert reply.blocks[0] == {"type": "thinking", "thinking": "let me see", "signature": "sig-1"}
    assert reply.served_by == "bedrock:anthropic.claude-sonnet-4-6"
    (got,) = api.requests
    assert got.platform == "bedrock" and got.model == "anthropic.claude-sonnet-4-6"
    assert got.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIAFAKEFAKEFAKE/")
    assert "/us-west-2/bedrock/" in got.headers["authorization"]
    assert "anthropic_version" in got.body and "stream" not in got.body


async def test_bedrock_errors_follow_the_same_retry_rules(api, aws):
    """A throttled Bedrock call is retried like a 429 from the API; a validation error is not."""
    api.script(HTTPError(429, "rate_limit_error", "Too many requests"), StreamBuilder().text("ok").done())
    _, reply = await collect(model("bedrock", api, model="anthropic.claude-sonnet-4-6"))
    assert reply.text == "ok" and len(api.requests) == 2
    api.script(HTTPError(400, "invalid_request_error", "malformed"))
    with pytest.raises(ModelError) as raised:
        await collect(model("bedrock", api, model="anthropic.claude-sonnet-4-6"))
    assert not raised.value.retryable and "malformed" in str(raised.value)


async def test_bedrock_error_inside_a_started_stream_is_retryable(api, aws):
    api.script(StreamBuilder().partial_text("half").error("overloaded_error", "Overloaded"))
    with pytest.raises(ModelError) as raised:
        await collect(model("bedrock", api, model="anthropic.claude-sonnet-4-6"))
    assert raised.value.retryable


def fallback(*peers: tuple[str, FakeMessagesAPI], clock: list[float] | None = None) -> FallbackModel:
    now = clock if clock is not None else [0.0]
    return FallbackModel(
        [Candidate(model(p, api, model="claude-sonnet-4-6"), Breaker(clock=lambda: now[0])) for p, api in peers]
    )


async def test_overloaded_provider_falls_back_and_its_breaker_opens():
    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("vertex", second))
        overloaded = HTTPError(529, "overloaded_error", "Overloaded")
        for _ in range(2):  # each call: the first provider's try and its one retry, then the second
            first.script(overloaded, overloaded)
            second.script(StreamBuilder().text("from vertex").done())
            _, reply = await collect(m)
            assert reply.served_by == "vertex:claude-sonnet-4-6"
        assert len(first.requests) == 4
        assert not m.candidates[0].breaker.closed  # two failed calls in a row: open
        second.script(StreamBuilder().text("again").done())
        _, reply = await collect(m)
        assert len(first.requests) == 4, "an open breaker sends nothing to its provider"
        assert reply.text == "again"


async def test_half_open_after_the_cooldown_and_closed_by_a_success():
    clock = [0.0]
    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("vertex", second), clock=clock)
        breaker = m.candidates[0].breaker
        breaker.failed(), breaker.failed()
        assert not breaker.closed
        clock[0] = breaker.cooldown + 1
        assert breaker.closed  # half open: one call may try it
        first.script(StreamBuilder().text("back").done())
        _, reply = await collect(m)
        assert reply.served_by == "anthropic:claude-sonnet-4-6" and breaker.failed_in_a_row == 0
        assert second.requests == []


@pytest.mark.parametrize(
    "status,kind", [(400, "invalid_request_error"), (401, "authentication_error"), (403, "permission_error")]
)
async def test_a_failure_every_provider_would_repeat_does_not_fall_back(status, kind):
    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("vertex", second))
        first.script(HTTPError(status, kind, "no"))
        with pytest.raises(ModelError) as raised:
            await collect(m)
        assert not raised.value.retryable
        assert second.requests == [] and m.candidates[0].breaker.failed_in_a_row == 0


async def test_a_failure_after_a_delta_is_raised_not_replayed_elsewhere():
    """Once text reached the user, another provider would stream a second, different reply:
    the failure goes to the engine (which redelivers the turn), the next provider gets nothing."""
    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("vertex", second))
        first.script(StreamBuilder().partial_text("half").error("overloaded_error", "Overloaded"))
        with pytest.raises(ModelError) as raised:
            await collect(m)
        assert raised.value.retryable and second.requests == []


async def test_every_provider_failing_says_each_reason():
    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("vertex", second))
        first.script(*[HTTPError(529, "overloaded_error", "Overloaded")] * 2)
        second.script(*[HTTPError(503, "api_error", "down for maintenance")] * 2)
        with pytest.raises(ModelError) as raised:
            await collect(m)
        assert raised.value.retryable
        assert "anthropic:claude-sonnet-4-6" in str(raised.value) and "down for maintenance" in str(raised.value)


async def test_a_tool_loop_continues_on_the_provider_that_made_the_call(aws):
    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("bedrock", second))
        call = ToolCall("tu_1", "get_weather", {"city": "Oslo"})
        loop = ModelRequest(
            system="",
            messages=(
                Message(Role.USER, text="weather?"),
                Message(Role.ASSISTANT, tool_calls=(call,), served_by="bedrock:claude-sonnet-4-6"),
                Message(Role.TOOL, call_id="tu_1", name="get_weather", result={"sky": "clear"}),
            ),
            tools=TOOLS,
        )
        second.script(StreamBuilder().text("clear").done())
        _, reply = await collect(m, loop)
        assert reply.served_by == "bedrock:claude-sonnet-4-6" and first.requests == []
        first.script(StreamBuilder().text("hello").done())  # a new question: the list's order again
        _, reply = await collect(m)
        assert reply.served_by == "anthropic:claude-sonnet-4-6"


def test_model_lists_in_agent_py_are_parsed_and_checked():
    agent = Agent("a", model=("anthropic:claude-sonnet-4-6", "vertex", "bedrock:anthropic.claude-sonnet-4-6-v1:0"))
    assert claude_models(agent) == [
        ("anthropic", "claude-sonnet-4-6"),
        ("vertex", None),
        ("bedrock", "anthropic.claude-sonnet-4-6-v1:0"),
    ]
    assert claude_models(Agent("d", model="demo")) == []
    with pytest.raises(AgentConfigError, match="Claude platforms only"):
        claude_models(Agent("x", model=("anthropic", "demo")))
    with pytest.raises(AgentConfigError, match="providers must be a dict"):
        claude_model("a", [("anthropic", None), ("vertex", None)], {"providers": {"bedrock": {}}})
    with pytest.raises(AgentConfigError, match="unknown anthropic model settings: region"):
        claude_model("a", [("anthropic", None)], {"region": "us"})


def test_a_list_gives_each_provider_its_place_and_one_retry():
    m = claude_model(
        "a",
        [("anthropic", "claude-sonnet-4-6"), ("vertex", None), ("bedrock", "anthropic.claude-sonnet-4-6")],
        {"model": "claude-sonnet-4-6@20250929", "max_tokens": 2048, "providers": PLACE},
    )
    assert isinstance(m, FallbackModel)
    labels = [c.model.served_by for c in m.candidates]
    assert labels == [
        "anthropic:claude-sonnet-4-6",
        "vertex:claude-sonnet-4-6@20250929",
        "bedrock:anthropic.claude-sonnet-4-6",
    ]
    assert {c.model.max_retries for c in m.candidates} == {1}
    assert {c.model.max_tokens for c in m.candidates} == {2048}


def test_served_by_is_kept_with_the_message():
    message = Message(Role.ASSISTANT, text="hi", served_by="vertex:claude-sonnet-4-6")
    assert Message.from_json(json.loads(json.dumps(message.to_json()))) == message
    assert "served_by" not in Message(Role.ASSISTANT, text="hi").to_json()


async def test_a_turn_records_who_answered_each_step(aws):
    """A whole turn (model → tool → model) through a list whose first provider is overloaded: each
    assistant message keeps who answered, and the turn's usage lists them."""

    @tool("get_weather", "Weather for a city", {"type": "object", "properties": {"city": {"type": "string"}}})
    def get_weather(input: dict[str, Any], ctx: Any) -> Any:
        return {"sky": "clear"}

    with FakeMessagesAPI() as first, FakeMessagesAPI() as second:
        m = fallback(("anthropic", first), ("bedrock", second))
        overloaded = HTTPError(529, "overloaded_error", "Overloaded")
        first.script(overloaded, overloaded)
        second.script(
            StreamBuilder().tool_use("tu_1", "get_weather", ['{"city":"Oslo"}']).done("tool_use"),
            StreamBuilder().text("Clear in Oslo").done(),
        )
        rt, store, _ = make_runtime(Agent("a", "instr", tools={"get_weather": get_weather}), m)
        session = rt.session("a", "s1")
        result = await session.result(await session.start("weather in Oslo?"), timeout=10)
        assert result.text == "Clear in Oslo"
        answered = [msg.served_by for msg in store.transcript(session.ref) if msg.role == Role.ASSISTANT]
        assert answered == ["bedrock:claude-sonnet-4-6"] * 2
        record = await store.get_turn(result.turn_id)
        assert record.usage["served_by"] == ["bedrock:claude-sonnet-4-6"]
        assert len(first.requests) == 2 and [r.platform for r in second.requests] == ["bedrock", "bedrock"]


def test_the_docs_agent_py_block_builds_the_model_it_describes():
    """docs/providers.md's agent.py block is code: each ``model =`` it shows loads, and the list
    with its ``model_config`` builds a three-provider fallback model."""
    block = re.search(r"```python\n(# agents/<name>/agent.py\n.*?)```", DOCS.read_text(), re.S)
    assert block is not None, "docs/providers.md lost its agent.py block"
    lines = block.group(1).splitlines()
    singles = [line for line in lines if line.startswith("model = ") and "[" not in line]
    for line in singles:
        scope: dict[str, Any] = {}
        exec(line, scope)
        assert claude_models(Agent("a", model=scope["model"]))
    scope = {}
    exec(block.group(1), scope)
    built = claude_model("a", claude_models(Agent("a", model=tuple(scope["model"]))), scope["model_config"])
    assert [c.platform for c in built.candidates] == ["anthropic", "vertex", "bedrock"]
