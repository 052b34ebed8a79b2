"""Where a request's prompt-cache breakpoints go (Anthropic's ``cache_control``): a pure function.

The Messages API caches a request's prefix — the tools, then the system prompt, then the
messages — up to each block marked ``cache_control``; a later request that starts with the same
prefix reads it at 0.1x the input price (a 5-minute write costs 1.25x, a 1-hour write 2x). At
most :data:`MAX_BREAKPOINTS` marks per request; a prefix under the model's minimum cacheable
length is not cached (no error: both usage counters read 0).

The rule for a model step (:func:`place_breakpoints`), at most three marks:

1. **head** — the system prompt (the last tool when there is none): tools + system, what every
   session of the agent shares and what survives a compaction boundary;
2. **previous** — the last block of the user message before the last assistant message: where
   the conversation's previous request ended (the previous call of this turn, or the last call of
   the previous turn), so this request reads everything up to there even when more than the
   API's 20-block lookback was added since (a step with many parallel tool calls);
3. **last** — the last block of the last message: written now, read by the next request.

A mark is placed only when the prefix it closes reaches the model's minimum, estimated as the
characters of the text the blocks carry divided by :data:`CHARS_PER_TOKEN` — cheap, and low for
prose (the API's tokenizer counts more tokens for JSON and code), so an estimate errs towards not
marking rather than towards a mark that caches nothing. The marks carry no TTL (the API's
5 minutes) or all the same ``"ttl": "1h"``: the API wants longer TTLs before shorter ones.

After a compaction the view starts with the new summary: the first request writes its prefix
once (one cache write), and the next ones read it, since the summary does not change until the
next boundary. Nothing here reads a clock: the system prompt must not carry one either, or no
two requests share a prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: the API refuses a request with more ("A maximum of 4 blocks with cache_control may be provided")
MAX_BREAKPOINTS = 4
#: the estimate of tokens from characters (English prose; JSON and code have more tokens)
CHARS_PER_TOKEN = 4
TTLS = ("5m", "1h")
#: minimum cacheable prompt length in tokens, by model id prefix (Anthropic's prompt caching docs;
#: claude-sonnet-4-6: documented 1,024, observed 2,048 in anthropic-sdk-python #1194: the higher)
MIN_CACHEABLE_TOKENS: dict[str, int] = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-sonnet-4-6": 2048,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
#: Sonnet 4.5 / 4, Opus 4.1 / 4, Sonnet 3.7, and a model the table does not know (a mark under a
#: model's real minimum caches nothing and costs nothing: no error, both counters read 0)
DEFAULT_MIN_CACHEABLE_TOKENS = 1024


def min_cacheable_tokens(model: str) -> int:
    """The model's minimum cacheable length: the longest table entry its id starts with."""
    matches = [prefix for prefix in MIN_CACHEABLE_TOKENS if model.startswith(prefix)]
    return MIN_CACHEABLE_TOKENS[max(matches, key=len)] if matches else DEFAULT_MIN_CACHEABLE_TOKENS


@dataclass(frozen=True)
class PromptCache:
    """How a model caches its prompts: the minimum prefix worth a mark, and the marks' TTL."""

    min_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS
    ttl: str = "5m"

    def __post_init__(self) -> None:
        if self.ttl not in TTLS:
            raise ValueError(f"cache ttl must be one of {', '.join(TTLS)}, not {self.ttl!r}")

    def control(self) -> dict[str, str]:
        """The ``cache_control`` of one mark (no ``ttl`` key for the API's default 5 minutes)."""
        return {"type": "ephemeral", "ttl": "1h"} if self.ttl == "1h" else {"type": "ephemeral"}


def block_chars(block: dict[str, Any]) -> int:
    """Characters of what one content block carries, for the token estimate."""
    kind = block.get("type")
    if kind == "text":
        return len(block.get("text") or "")
    if kind == "thinking":
        return len(block.get("thinking") or "")
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return sum(block_chars(b) for b in content if isinstance(b, dict))
        return len(content or "") if isinstance(content, str) else len(json.dumps(content))
    if kind == "tool_use":
        return len(block.get("name") or "") + len(json.dumps(block.get("input") or {}))
    return len(json.dumps(block))


#: a tool definition's ``json.dumps`` length by (name, description, id of its schema), with the
#: schema itself (its identity checked: an id outlives no object held here). A tool's schema is
#: one object for the life of its agent: its length is worked out once, not at every model call
_TOOL_CHARS: dict[tuple[Any, Any, int], tuple[Any, int]] = {}
_TOOL_CHARS_MAX = 1024
_TOOL_KEYS = frozenset({"name", "description", "input_schema"})


def _tool_chars(tool: dict[str, Any]) -> int:
    schema = tool.get("input_schema")
    if not isinstance(schema, dict) or tool.keys() != _TOOL_KEYS:
        return len(json.dumps(tool))
    key = (tool["name"], tool["description"], id(schema))
    known = _TOOL_CHARS.get(key)
    if known is not None and known[0] is schema:
        return known[1]
    chars = len(json.dumps(tool))
    if len(_TOOL_CHARS) >= _TOOL_CHARS_MAX:
        _TOOL_CHARS.clear()
    _TOOL_CHARS[key] = (schema, chars)
    return chars


def tools_chars(tools: Any) -> int:
    """Characters of a request's tool definitions, for the token estimate."""
    return sum(_tool_chars(t) for t in tools or ())


def _head_chars(params: dict[str, Any], tools: int | None = None) -> int:
    return (tools_chars(params.get("tools")) if tools is None else tools) + len(params.get("system") or "")


def _marked(block: dict[str, Any], control: dict[str, str]) -> dict[str, Any]:
    return {**block, "cache_control": dict(control)}


def place_breakpoints(params: dict[str, Any], cache: PromptCache, *, tools: int | None = None) -> dict[str, Any]:
    """``params`` (the keyword arguments of ``messages.create``) with ``cache_control`` on the
    head, the previous request's end and the last message (the module's rule), each only when
    the prefix it closes reaches ``cache.min_tokens``; never more than :data:`MAX_BREAKPOINTS`.
    ``tools``: the ``tools_chars`` of ``params["tools"]`` where the caller knows it already.
    The input is not changed: marked blocks and their containers are copies."""
    out = dict(params)
    control = cache.control()
    min_chars = cache.min_tokens * CHARS_PER_TOKEN
    messages: list[dict[str, Any]] = list(params.get("messages") or ())
    head = _head_chars(params, tools)
    marks = 0
    if head >= min_chars:
        system = params.get("system")
        if system:
            out["system"] = [_marked({"type": "text", "text": system}, control)]
            marks += 1
        elif params.get("tools"):
            tools = list(params["tools"])
            tools[-1] = _marked(tools[-1], control)
            out["tools"] = tools
            marks += 1
    # the prefix's size at the end of each message
    ends: list[int] = []
    size = head
    for message in messages:
        size += sum(block_chars(b) for b in message["content"])
        ends.append(size)
    users = [i for i, m in enumerate(messages) if m["role"] == "user" and m["content"]]
    last = users[-1] if users else None
    previous = next(
        (
            i
            for i in reversed(users)
            if last is not None and i < last and any(m["role"] == "assistant" for m in messages[i + 1 : last + 1])
        ),
        None,
    )
    for index in (previous, last):
        if index is None or ends[index] < min_chars or marks >= MAX_BREAKPOINTS:
            continue
        content = list(messages[index]["content"])
        content[-1] = _marked(content[-1], control)
        messages[index] = {**messages[index], "content": content}
        marks += 1
    if messages:
        out["messages"] = messages
    return out


def breakpoints(params: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Where ``params`` carries ``cache_control``: ``("tools", i, -1)``, ``("system", i, -1)`` or
    ``("messages", message, block)`` — for tests and the benchmark."""
    found: list[tuple[str, int, int]] = []
    for i, tool in enumerate(params.get("tools") or ()):
        if "cache_control" in tool:
            found.append(("tools", i, -1))
    system = params.get("system")
    if isinstance(system, list):
        found += [("system", i, -1) for i, b in enumerate(system) if "cache_control" in b]
    for i, message in enumerate(params.get("messages") or ()):
        content = message["content"]
        if isinstance(content, list):
            found += [("messages", i, j) for j, b in enumerate(content) if "cache_control" in b]
    return found
