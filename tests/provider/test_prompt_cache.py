"""Prompt caching: where the ``cache_control`` marks go (by table), what the API receives through
the real SDK, and what a caching peer (``caching_api``) reports for a conversation, across a
compaction boundary included."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agents_app.providers.anthropic import AnthropicModel, from_settings
from agents_app.providers.anthropic_request import build_messages
from agents_app.providers.prompt_cache import (
    CHARS_PER_TOKEN,
    MAX_BREAKPOINTS,
    PromptCache,
    block_chars,
    breakpoints,
    min_cacheable_tokens,
    place_breakpoints,
)
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.messages import Message, Role, ToolCall
from agents_app.runtime.model import ModelReply, ModelRequest, ToolSpec

from .caching_api import CachingMessagesAPI, PromptCacheRules
from .fake_messages_api import FakeMessagesAPI, StreamBuilder

MIN = 1024  # tokens; the marks' threshold in these tables is MIN * CHARS_PER_TOKEN characters
BIG = "x" * (MIN * CHARS_PER_TOKEN)  # one block that alone reaches the minimum
SMALL = "short"
TOOL = {"name": "lookup", "description": "Look a thing up", "input_schema": {"type": "object"}}
EPHEMERAL = {"type": "ephemeral"}


def user(text: str) -> Message:
    return Message(Role.USER, text=text)


def assistant(text: str = "", *calls: ToolCall) -> Message:
    return Message(Role.ASSISTANT, text=text, tool_calls=calls)


def result(call_id: str, value: str) -> Message:
    return Message(Role.TOOL, call_id=call_id, name="lookup", result=value)


def params(*transcript: Message, system: str = SMALL, tools: tuple[dict[str, Any], ...] = (TOOL,)) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "m", "max_tokens": 10, "messages": build_messages(transcript)}
    if system:
        out["system"] = system
    if tools:
        out["tools"] = list(tools)
    return out


CALL = ToolCall("toolu_1", "lookup", {"q": "a"})

# (case, params, expected marks: ("system"|"tools", i, -1) or ("messages", message, block))
PLACEMENT = [
    (
        "everything under the minimum: no mark, the system prompt stays a string",
        params(user(SMALL), assistant(SMALL), user(SMALL)),
        [],
    ),
    (
        "a system prompt at the minimum: head and, the prefix past it, the last message",
        params(user(SMALL), system=BIG),
        [("system", 0, -1), ("messages", 0, 0)],
    ),
    (
        "no system prompt: the head mark is on the last tool",
        params(user(SMALL), system="", tools=(TOOL, {**TOOL, "name": "t2", "description": BIG})),
        [("tools", 1, -1), ("messages", 0, 0)],
    ),
    ("a small head, a big first message: the last message only", params(user(BIG)), [("messages", 0, 0)]),
    (
        "one exchange later: the previous request's end and the last message",
        params(user(BIG), assistant(SMALL), user(SMALL)),
        [("messages", 0, 0), ("messages", 2, 0)],
    ),
    (
        "a tool step: the previous request's end, and the last of the tool results",
        params(
            user(BIG),
            assistant("", CALL, ToolCall("toolu_2", "lookup", {})),
            result("toolu_1", SMALL),
            result("toolu_2", SMALL),
        ),
        [("messages", 0, 0), ("messages", 2, 1)],
    ),
    (
        "the previous end under the minimum, the last message past it: the last only",
        params(user(SMALL), assistant(SMALL), user(BIG)),
        [("messages", 2, 0)],
    ),
    (
        "all three: head, previous, last (never a fourth)",
        params(user(SMALL), assistant(SMALL), user(SMALL), assistant(SMALL), user(SMALL), system=BIG),
        [("system", 0, -1), ("messages", 2, 0), ("messages", 4, 0)],
    ),
    (
        "a summary opens the view: marks as for any user message",
        params(Message(Role.SUMMARY, text=BIG, boundary=4), user(SMALL), assistant(SMALL), user(SMALL)),
        [("messages", 0, 1), ("messages", 2, 0)],
    ),
]


@pytest.mark.parametrize("case, request_params, expected", PLACEMENT, ids=[c[0] for c in PLACEMENT])
def test_breakpoint_placement(case, request_params, expected):
    before = repr(request_params)
    placed = place_breakpoints(request_params, PromptCache(min_tokens=MIN))
    assert breakpoints(placed) == expected
    assert repr(request_params) == before, "the input params were changed"
    if not expected:
        assert placed == request_params
    if ("system", 0, -1) not in expected and "system" in request_params:
        assert placed["system"] == request_params["system"]
    for where, i, j in expected:
        block = placed[where][i] if j < 0 else placed[where][i]["content"][j]
        if where == "system":
            assert block == {"type": "text", "text": request_params["system"], "cache_control": EPHEMERAL}
        else:
            assert block["cache_control"] == EPHEMERAL


def test_the_one_hour_ttl_is_on_every_mark():
    placed = place_breakpoints(
        params(user(SMALL), assistant(SMALL), user(SMALL), system=BIG), PromptCache(min_tokens=MIN, ttl="1h")
    )
    marks = breakpoints(placed)
    assert len(marks) == 3
    assert placed["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert all(
        placed["messages"][i]["content"][j]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        for _, i, j in marks[1:]
    )
    with pytest.raises(ValueError):
        PromptCache(ttl="10m")


def _prefix_chars(p: dict[str, Any], mark: tuple[str, int, int]) -> int:
    """Characters of the prefix a mark closes, counted the way the rule counts them."""
    import json

    head = sum(len(json.dumps({k: v for k, v in t.items() if k != "cache_control"})) for t in p.get("tools") or ())
    system = p.get("system") or ""
    head += len(system if isinstance(system, str) else "".join(b["text"] for b in system))
    where, i, j = mark
    if where != "messages":
        return head
    blocks = [b for m in p["messages"][:i] for b in m["content"]] + p["messages"][i]["content"][: j + 1]
    return head + sum(block_chars({k: v for k, v in b.items() if k != "cache_control"}) for b in blocks)


def test_random_conversations_never_exceed_four_marks_nor_mark_under_the_minimum():
    """pydantic-ai #3453 shipped "A maximum of 4 blocks with cache_control may be provided.
    Found 7.": however long the conversation and however many tool calls a step makes, at most
    4 marks (ours: 3), none on an assistant block, none closing a prefix under the minimum, and
    the last message marked whenever its prefix reaches it."""
    rng = random.Random(37)
    for _ in range(300):
        transcript: list[Message] = [user("u" * rng.randrange(1, 3000))]
        for step in range(rng.randrange(0, 12)):
            calls = tuple(ToolCall(f"t{step}_{k}", "lookup", {"k": k}) for k in range(rng.randrange(0, 25)))
            transcript.append(assistant("a" * rng.randrange(0, 800), *calls))
            transcript += [result(c.id, "r" * rng.randrange(1, 600)) for c in calls]
            if not calls:
                transcript.append(user("u" * rng.randrange(1, 3000)))
        p = params(*transcript, system="s" * rng.randrange(0, 6000))
        min_tokens = rng.choice((1024, 2048, 4096))
        placed = place_breakpoints(p, PromptCache(min_tokens=min_tokens))
        marks = breakpoints(placed)
        assert len(marks) <= MAX_BREAKPOINTS and len(marks) <= 3
        for mark in marks:
            assert _prefix_chars(placed, mark) >= min_tokens * CHARS_PER_TOKEN
            if mark[0] == "messages":
                assert placed["messages"][mark[1]]["role"] == "user"
        last = len(placed["messages"]) - 1
        last_mark = ("messages", last, len(placed["messages"][last]["content"]) - 1)
        if _prefix_chars(placed, last_mark) >= min_tokens * CHARS_PER_TOKEN:
            assert marks[-1] == last_mark


def test_minimum_cacheable_length_by_model_and_setting():
    assert min_cacheable_tokens("claude-opus-4-6") == 4096
    assert min_cacheable_tokens("claude-opus-4-5-20251101") == 4096
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert min_cacheable_tokens("claude-sonnet-4-6") == 2048
    assert min_cacheable_tokens("claude-3-5-haiku-latest") == 2048
    assert min_cacheable_tokens("claude-sonnet-4-5") == 1024
    assert min_cacheable_tokens("claude-opus-4-1") == 1024
    assert min_cacheable_tokens("some-future-model") == 1024
    assert from_settings({}).prompt_cache == PromptCache(min_tokens=2048, ttl="5m")
    assert from_settings({"model": "claude-haiku-4-5"}).prompt_cache == PromptCache(min_tokens=4096)
    assert from_settings({"cache_min_tokens": 1500, "cache_ttl": "1h"}).prompt_cache == PromptCache(1500, "1h")
    assert from_settings({"prompt_cache": False}).prompt_cache is None
    for bad in (
        {"prompt_cache": "yes"},
        {"cache_ttl": "1d"},
        {"cache_min_tokens": 0},
        {"cache_min_tokens": True},
        {"cache_ttl": 300},
    ):
        with pytest.raises(AgentConfigError):
            from_settings(bad)


# --- through the real SDK ----------------------------------------------------------------------

SPECS = (ToolSpec("lookup", "Look a thing up", {"type": "object"}),)


def _tool_step(system: str) -> ModelRequest:
    return ModelRequest(system=system, tools=SPECS, messages=(user(BIG), assistant("", CALL), result("toolu_1", SMALL)))


async def _send(model: AnthropicModel, request: ModelRequest) -> ModelReply:
    replies = [c async for c in model.stream(request) if isinstance(c, ModelReply)]
    return replies[-1]


@pytest.mark.parametrize(
    "settings, control",
    [
        ({}, {"type": "ephemeral"}),
        ({"cache_ttl": "1h"}, {"type": "ephemeral", "ttl": "1h"}),
        ({"prompt_cache": False}, None),
    ],
)
async def test_the_sdk_sends_the_marks_in_the_request_body(settings, control):
    with FakeMessagesAPI() as api:
        api.script(StreamBuilder().text("ok").done("end_turn"))
        model = AnthropicModel(api_key="k", base_url=api.base_url, cache_min_tokens=MIN, **settings)
        await _send(model, _tool_step(system=BIG))
        body = api.requests[0].body
    if control is None:
        assert breakpoints(body) == [] and body["system"] == BIG
        assert b"cache_control" not in api.requests[0].raw
        return
    assert breakpoints(body) == [("system", 0, -1), ("messages", 0, 0), ("messages", 2, 0)]
    assert body["system"] == [{"type": "text", "text": BIG, "cache_control": control}]
    assert body["messages"][0]["content"][0] == {"type": "text", "text": BIG, "cache_control": control}
    assert body["messages"][2]["content"][0]["cache_control"] == control
    assert body["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "lookup",
        "input": {"q": "a"},
    }


async def test_a_compaction_call_carries_no_mark():
    """A summarizing call's prefix is used once: a write would cost 1.25x and never be read."""
    with FakeMessagesAPI() as api:
        api.script(StreamBuilder().text("summary").done("end_turn"))
        model = AnthropicModel(api_key="k", base_url=api.base_url, cache_min_tokens=MIN)
        request = ModelRequest(system=BIG, messages=(user(BIG),), tools=(), purpose="compact")
        await _send(model, request)
        assert breakpoints(api.requests[0].body) == []


async def test_usage_records_the_one_hour_writes_apart():
    """A 1-hour write costs 2x the input price, a 5-minute one 1.25x: the usage keeps the
    1-hour part (``cache_creation.ephemeral_1h_input_tokens``) so the console can price it."""
    with CachingMessagesAPI(min_tokens=MIN) as api:
        model = AnthropicModel(api_key="k", base_url=api.base_url, cache_min_tokens=MIN, cache_ttl="1h")
        reply = await _send(model, _tool_step(system=BIG))
        again = await _send(model, _tool_step(system=BIG))
    assert reply.usage["cache_creation_input_tokens"] == reply.usage["cache_creation_1h_input_tokens"] > 2 * MIN
    assert reply.usage["cache_read_input_tokens"] == 0
    assert again.usage["cache_read_input_tokens"] == reply.usage["cache_creation_input_tokens"]
    assert "cache_creation_1h_input_tokens" not in again.usage  # nothing written


async def test_a_conversation_reads_its_history_from_the_cache():
    """Each request reads what the one before it wrote: from the second request on, every
    input token but the newest exchange's is a cache read."""
    with CachingMessagesAPI(min_tokens=MIN, respond=lambda body: [{"type": "text", "text": "r" * 2500}]) as api:
        model = AnthropicModel(api_key="k", base_url=api.base_url, cache_min_tokens=MIN)
        transcript: list[Message] = []
        usages = []
        for turn in range(6):
            transcript.append(user(f"{turn} " + "u" * 2500))
            reply = await _send(model, ModelRequest(system="You are terse.", messages=tuple(transcript), tools=SPECS))
            transcript.append(Message(Role.ASSISTANT, text=reply.text, blocks=reply.blocks, usage=reply.usage))
            usages.append(reply.usage)
    assert usages[0]["cache_read_input_tokens"] == 0 and usages[0]["cache_creation_input_tokens"] == 0  # < MIN
    assert usages[1]["cache_read_input_tokens"] == 0 and usages[1]["cache_creation_input_tokens"] > MIN
    for before, now in zip(usages[1:], usages[2:]):
        written_before = before["cache_read_input_tokens"] + before["cache_creation_input_tokens"]
        assert now["cache_read_input_tokens"] == written_before
        total = now["input_tokens"] + now["cache_read_input_tokens"] + now["cache_creation_input_tokens"]
        assert now["cache_read_input_tokens"] / total > 0.6


async def test_the_prefix_stays_cached_across_a_compaction_boundary():
    """After a compaction the view opens with the summary, which does not change until the next
    boundary: the first request after it writes the new prefix once, every later one reads it
    (not one write per call); the summarizing call itself carries no mark."""
    from agents_app.runtime import Agent, InMemorySessionStore, Runtime, TurnStatus

    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        if str(body.get("system", "")).startswith("You maintain the memory"):
            return [{"type": "text", "text": "Summary: " + "s" * 3000}]
        return [{"type": "text", "text": "r" * 2500}]

    with CachingMessagesAPI(min_tokens=MIN, respond=respond) as api:
        model = AnthropicModel(api_key="k", base_url=api.base_url, cache_min_tokens=MIN)
        store = InMemorySessionStore()
        agent = Agent(
            name="a",
            instructions="You are terse.",
            compaction={"keep_last": 1, "context_window": 8000, "threshold": 0.6},
        )
        session = Runtime(store=store, agents={"a": agent}, model_for=lambda _a: model).session("a", "s1")
        for turn in range(10):
            assert (await session.turn(f"{turn} " + "u" * 2500, timeout=10)).status == TurnStatus.COMPLETED
        roles = [m.role for m in store.transcript(session.ref)]
    assert roles.count(Role.SUMMARY) >= 2, roles
    calls = list(zip(api.bodies, api.usages))
    summarizing = [i for i, (b, _) in enumerate(calls) if "tools" not in b and "You maintain" in str(b.get("system"))]
    assert summarizing and all(breakpoints(calls[i][0]) == [] for i in summarizing)
    for i in summarizing:
        after = [u for b, u in calls[i + 1 :] if "You maintain" not in str(b.get("system"))]
        # the new view's first request writes it (the head is under the minimum: no mark)
        assert after[0].cache_read_input_tokens == 0 and after[0].cache_creation_input_tokens > MIN
    # between boundaries every request reads what the one before wrote
    turn_calls = [(b, u) for b, u in calls if "You maintain" not in str(b.get("system"))]
    for (b0, u0), (b1, u1) in zip(turn_calls, turn_calls[1:]):
        if b1["messages"][0] == b0["messages"][0]:  # same view head: no boundary in between
            assert u1.cache_read_input_tokens == u0.cache_read_input_tokens + u0.cache_creation_input_tokens


def test_the_peer_refuses_a_fifth_mark_and_expires_entries():
    now = [0.0]
    rules = PromptCacheRules(min_tokens=10, clock=lambda: now[0])
    five = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": BIG, "cache_control": EPHEMERAL} for _ in range(5)]}
        ],
    }
    with pytest.raises(Exception, match="A maximum of 4 blocks with cache_control may be provided. Found 5."):
        rules.apply(five)
    one = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": BIG, "cache_control": EPHEMERAL}]}],
    }
    assert rules.apply(one).cache_creation_input_tokens > 0
    now[0] = 299.0
    assert rules.apply(one).cache_read_input_tokens > 0  # and the read refreshes it
    now[0] = 598.0
    assert rules.apply(one).cache_read_input_tokens > 0
    now[0] = 899.0
    assert rules.apply(one).cache_read_input_tokens == 0


def test_a_tools_measure_is_kept_for_its_schema_object_only():
    """The head's size counts each tool's JSON: kept per schema object, measured anew for
    another object (a reloaded agent) or another shape (a server tool, a marked tool)."""
    import json

    from agents_app.providers.prompt_cache import _head_chars

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    tool = ToolSpec("count", "counts", schema).to_json()
    want = len(json.dumps(tool))
    assert _head_chars({"tools": [tool]}) == want
    assert _head_chars({"tools": [ToolSpec("count", "counts", schema).to_json()]}) == want
    bigger = {**schema, "required": ["n"]}  # a new object under the same name: measured again
    assert _head_chars({"tools": [ToolSpec("count", "counts", bigger).to_json()]}) == len(
        json.dumps(ToolSpec("count", "counts", bigger).to_json())
    )
    marked = {**tool, "cache_control": {"type": "ephemeral"}}
    assert _head_chars({"tools": [marked], "system": "abc"}) == len(json.dumps(marked)) + 3
