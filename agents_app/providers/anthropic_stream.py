"""A streamed Messages API reply folded from its raw events (plain JSON dicts), as pure
functions tested by table: ``fold_event`` (one event into the ``Snapshot``, returning the delta to
show live) and ``reply_from`` (the complete snapshot as a ``ModelReply``). No SDK import here:
``anthropic`` (the provider) feeds it each server-sent event's JSON as the SDK reads it off the wire."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agents_app.runtime.messages import ToolCall
from agents_app.runtime.model import ModelError, ModelReply, ReasoningDelta, StopReason, TextDelta

#: the API's words for a request longer than the model's context window (a 400's message, a
#: batch's errored result): the call overflowed, the loop compacts and asks again
OVERFLOW_WORDS = re.compile(r"prompt is too long|context window|context limit|exceeds? .*context", re.I)

_STOP_REASONS = {
    "end_turn": StopReason.END_TURN,
    "tool_use": StopReason.TOOL_USE,
    "max_tokens": StopReason.MAX_TOKENS,
    "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL,
    "pause_turn": StopReason.PAUSE_TURN,
    "model_context_window_exceeded": StopReason.CONTEXT_OVERFLOW,
}
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
#: the usage key of the 1-hour part of ``cache_creation_input_tokens`` (priced 2x, not 1.25x)
CACHE_WRITE_1H_KEY = "cache_creation_1h_input_tokens"


@dataclass
class Snapshot:
    """The reply so far, folded from raw stream events (plain JSON dicts)."""

    content: list[dict[str, Any]] = field(default_factory=list)
    partial_json: dict[int, str] = field(default_factory=dict)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    stopped: bool = False  # ``message_stop`` seen: the stream is complete


def merge_usage(snapshot: Snapshot, usage: dict[str, Any] | None) -> None:
    if not usage:
        return
    # usage on message_delta is cumulative and omits what does not apply: overwrite, keep others
    for key in USAGE_KEYS:
        value = usage.get(key)
        if value is not None:
            snapshot.usage[key] = int(value)
    # the writes by TTL: a 1-hour write costs 2x the input price, a 5-minute one 1.25x
    creation = usage.get("cache_creation")
    if isinstance(creation, dict) and creation.get("ephemeral_1h_input_tokens") is not None:
        snapshot.usage[CACHE_WRITE_1H_KEY] = int(creation["ephemeral_1h_input_tokens"])


def fold_event(snapshot: Snapshot, event: dict[str, Any]) -> TextDelta | ReasoningDelta | None:
    """Fold one raw stream event into ``snapshot``; return the delta to show live, if any."""
    kind = event.get("type")
    if kind == "message_start":
        merge_usage(snapshot, event["message"].get("usage"))
    elif kind == "content_block_start":
        snapshot.content.append(dict(event["content_block"]))
    elif kind == "content_block_delta":
        index, delta = event["index"], event["delta"]
        block = snapshot.content[index]
        dtype = delta.get("type")
        if dtype == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
            return TextDelta(delta["text"]) if delta["text"] else None
        if dtype == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
            return ReasoningDelta(delta["thinking"]) if delta["thinking"] else None
        if dtype == "signature_delta":
            block["signature"] = delta["signature"]
        elif dtype == "compaction_delta":  # the whole summary at once, not a fragment
            for key in ("content", "encrypted_content"):
                if key in delta:
                    block[key] = delta[key]
        elif dtype == "input_json_delta":
            snapshot.partial_json[index] = snapshot.partial_json.get(index, "") + delta["partial_json"]
        elif dtype == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
    elif kind == "content_block_stop":
        index = event["index"]
        if index in snapshot.partial_json:
            raw = snapshot.partial_json.pop(index)
            try:
                snapshot.content[index]["input"] = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as exc:
                raise ModelError(f"Anthropic API sent invalid tool input JSON: {exc}: {raw[:200]!r}") from exc
    elif kind == "message_delta":
        snapshot.stop_reason = (event.get("delta") or {}).get("stop_reason")
        merge_usage(snapshot, event.get("usage"))
    elif kind == "message_stop":
        snapshot.stopped = True
    return None


def map_stop_reason(raw: str | None, has_content: bool) -> StopReason:
    """The API's stop reason as ours; an unknown one is a normal end if anything was said."""
    if raw in _STOP_REASONS:
        return _STOP_REASONS[raw]
    return StopReason.END_TURN if has_content else StopReason.ERROR


def reply_from(snapshot: Snapshot) -> ModelReply:
    """The final reply of a complete stream."""
    usage = {key: snapshot.usage.get(key, 0) for key in USAGE_KEYS}
    if snapshot.usage.get(CACHE_WRITE_1H_KEY):
        usage[CACHE_WRITE_1H_KEY] = snapshot.usage[CACHE_WRITE_1H_KEY]
    # a null field carries nothing and some request schemas refuse it: send back what is set
    # (a compaction block goes back exactly as it came, a null ``content`` included)
    blocks = tuple(
        dict(b) if b.get("type") == "compaction" else {k: v for k, v in b.items() if v is not None}
        for b in snapshot.content
    )
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    calls = tuple(
        ToolCall(id=b["id"], name=b["name"], input=b.get("input") or {}) for b in blocks if b.get("type") == "tool_use"
    )
    stop = map_stop_reason(snapshot.stop_reason, bool(text or calls))
    if stop == StopReason.CONTEXT_OVERFLOW:
        # nothing of an overflowed reply is kept: the step fails and compaction redoes it
        return ModelReply(stop_reason=stop, usage=usage)
    return ModelReply(text=text, tool_calls=calls, blocks=blocks, stop_reason=stop, usage=usage)
