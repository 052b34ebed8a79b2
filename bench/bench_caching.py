#!/usr/bin/env python
"""Prompt caching's figures, in ONE run: a 30-turn conversation through the real SDK
(``AnthropicModel``) against a local Messages API peer that applies the API's caching rules
(``tests/provider/caching_api.py``: prefix entries at the breakpoints, 20-block lookback, the
model's minimum length, TTLs refreshed on read, usage as the API reports it).

    .venv/bin/python bench/bench_caching.py

- the conversation: a system prompt of ~2,000 tokens and 3 tools (what an agent sends), then per
  turn a ~2,500-character user message and a ~2,500-character answer; every third turn the model
  first calls a tool whose result is ~2,500 characters (two requests that turn);
- the same conversation with caching off (``prompt_cache: False``) and on (the default: 5-minute
  TTL), turns a minute apart on the peer's simulated clock; per turn: input tokens, cache writes
  and reads, and the input cost (claude-sonnet-4-6's prices through the console's ``cost_of``);
- then turns 10 minutes apart, 5-minute TTL against ``cache_ttl: "1h"``: totals only.

Goals (issue 37): from the 4th request on, >= 70% of input tokens are cache reads; the input cost
of turn 30 is >= 3x lower with caching than without.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
os.environ.setdefault("SECRET_KEY", "bench-caching")
import django  # noqa: E402

django.setup()
from agents_app.providers.anthropic import AnthropicModel  # noqa: E402
from agents_app.runtime.messages import Message, Role  # noqa: E402
from agents_app.runtime.model import ModelReply, ModelRequest, ToolSpec  # noqa: E402
from sessions_app.admin.console import cost_of  # noqa: E402
from tests.provider.caching_api import CachingMessagesAPI  # noqa: E402

MODEL = "claude-sonnet-4-6"
TURNS = int(os.environ.get("BENCH_TURNS", "30"))
CHARS = 2_500
TOOL_EVERY = 3
WORDS = (
    "stock order mug pear invoice shipment warehouse supplier refund customer blue red "
    "quantity price delivery schedule report margin backlog carrier pallet"
).split()


def prose(seed: int, chars: int = CHARS) -> str:
    """Deterministic English-like text of ``chars`` characters (differs by seed)."""
    out, i = [], seed * 7919
    while sum(len(w) + 1 for w in out) < chars:
        out.append(WORDS[(i * 31 + len(out) * 17) % len(WORDS)])
        i += 1
    return " ".join(out)[:chars]


SYSTEM = (
    "You are the operations assistant of a small shop. " + prose(-1, 8_000) + "\nAnswer precisely; cite order numbers."
)
TOOLS = tuple(
    ToolSpec(
        name,
        f"{name.replace('_', ' ')}: " + prose(i, 300),
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    )
    for i, name in enumerate(("lookup_stock", "create_order", "find_invoice"))
)


def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The peer's model: a tool call first on every third turn, else a ~2,500-character answer."""
    last = body["messages"][-1]["content"][-1]
    turn = sum(1 for m in body["messages"] for b in m["content"] if b.get("type") == "text" and m["role"] == "user")
    if last.get("type") == "text" and turn % TOOL_EVERY == 0:
        return [{"type": "tool_use", "id": f"toolu_{turn}", "name": "lookup_stock", "input": {"query": f"t{turn}"}}]
    return [{"type": "text", "text": prose(10_000 + turn)}]


def input_cost(usage: dict[str, int]) -> float:
    return cost_of({k: v for k, v in usage.items() if k != "output_tokens"}, MODEL) or 0.0


async def conversation(turn_gap: float, **settings: Any) -> list[list[dict[str, int]]]:
    """The usage of each request, grouped by turn."""
    now = [0.0]
    per_turn: list[list[dict[str, int]]] = []
    with CachingMessagesAPI(min_tokens=2048, respond=respond, clock=lambda: now[0]) as api:
        model = AnthropicModel(model=MODEL, api_key="bench", base_url=api.base_url, **settings)
        transcript: list[Message] = []
        for turn in range(1, TURNS + 1):
            now[0] = (turn - 1) * turn_gap
            transcript.append(Message(Role.USER, text=f"Turn {turn}. " + prose(turn)))
            usages: list[dict[str, int]] = []
            while True:
                request = ModelRequest(system=SYSTEM, messages=tuple(transcript), tools=TOOLS)
                reply = [c async for c in model.stream(request) if isinstance(c, ModelReply)][-1]
                usages.append(reply.usage)
                transcript.append(
                    Message(
                        Role.ASSISTANT,
                        text=reply.text,
                        tool_calls=reply.tool_calls,
                        blocks=reply.blocks,
                        usage=reply.usage,
                    )
                )
                if not reply.tool_calls:
                    break
                now[0] += 3.0  # the tool's time
                transcript += [
                    Message(Role.TOOL, call_id=c.id, name=c.name, result=prose(20_000 + turn)) for c in reply.tool_calls
                ]
            per_turn.append(usages)
    return per_turn


def total(usages: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in usages:
        for k, v in u.items():
            out[k] = out.get(k, 0) + v
    return out


def read_share(u: dict[str, int]) -> float:
    whole = u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
    return u["cache_read_input_tokens"] / whole if whole else 0.0


def summary(label: str, per_turn: list[list[dict[str, int]]]) -> tuple[float, float]:
    requests = [u for usages in per_turn for u in usages]
    shares = [read_share(u) for u in requests[3:]]
    cost = sum(input_cost(total(t)) for t in per_turn)
    print(
        f"  {label:<42} input cost of {TURNS} turns ${cost:.4f}; from request 4: cache reads "
        f"min {min(shares):.0%}, mean {sum(shares) / len(shares):.0%} of input tokens"
    )
    return cost, min(shares)


async def main() -> None:
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(
        f"{MODEL}: system prompt {len(SYSTEM):,} characters, {len(TOOLS)} tools; {TURNS} turns of "
        f"~{CHARS:,}-character messages, a tool call every {TOOL_EVERY} turns; turns 60 s apart\n"
    )
    off = await conversation(60.0, prompt_cache=False)
    on = await conversation(60.0)
    print(
        f"{'turn':>4} {'req':>3} | {'off: input':>10} {'cost $':>8} | {'on: input':>9} {'write':>6} {'read':>6}"
        f" {'read%':>5} {'cost $':>8} | {'off/on':>6}"
    )
    n = 0
    for turn, (a, b) in enumerate(zip(off, on), start=1):
        ta, tb = total(a), total(b)
        n += len(b)
        ca, cb = input_cost(ta), input_cost(tb)
        print(
            f"{turn:>4} {n:>3} | {ta['input_tokens']:>10,} {ca:>8.5f} | {tb['input_tokens']:>9,}"
            f" {tb['cache_creation_input_tokens']:>6,} {tb['cache_read_input_tokens']:>6,}"
            f" {read_share(tb):>5.0%} {cb:>8.5f} | {ca / cb:>5.1f}x"
        )
    print()
    cost_off, _ = summary("off", off)
    cost_on, min_share = summary("on (5-minute TTL), turns 60 s apart", on)
    last_ratio = input_cost(total(off[-1])) / input_cost(total(on[-1]))
    print(f"  whole conversation: {cost_off / cost_on:.1f}x cheaper in input\n")

    print("turns 10 minutes apart:")
    slow_off = await conversation(600.0, prompt_cache=False)
    slow_5m = await conversation(600.0)
    slow_1h = await conversation(600.0, cache_ttl="1h")
    summary("off", slow_off)
    summary("on, 5-minute TTL (expires between turns)", slow_5m)
    summary('on, cache_ttl "1h"', slow_1h)
    print()
    print(f"goal: from request 4 >= 70% cache reads: min {min_share:.0%} -> {'met' if min_share >= 0.7 else 'MISSED'}")
    print(
        f"goal: input cost of turn {TURNS} >= 3x lower: {last_ratio:.1f}x -> {'met' if last_ratio >= 3 else 'MISSED'}"
    )
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    asyncio.run(main())
