"""Compaction test agent: model ``compactmodel`` (registered at import, in whichever process
loads the agent). A scripted model that reports realistic usage (the request's size as input
tokens, characters / 4) and has a small window, so a long session compacts every few turns.

Every reply is ~40 tokens; an opening text ending in ``:tool`` first calls ``compact_noop``.
Past ``WINDOW`` tokens it stops with ``context_overflow``. A compaction's call records
``summarize-<turn>`` and has the pause point ``compact:mid`` (tests/fault/faultkit.py).
"""

from __future__ import annotations

from typing import AsyncIterator

from agents_app.providers import register
from agents_app.runtime.compaction import view_tokens
from agents_app.runtime.messages import Role, ToolCall
from agents_app.runtime.model import ModelReply, StopReason, TextDelta
from tests.fault import faultkit

WINDOW = 1_000
model = "compactmodel"
compaction = {"context_window": WINDOW, "threshold": 0.6, "keep_last": 2}


class CompactModel:
    context_window = WINDOW

    async def stream(self, request) -> AsyncIterator[object]:
        turn_id = request.stream_key.split(":", 1)[0]
        tokens = view_tokens(request.system, request.messages)
        if tokens > WINDOW:
            yield ModelReply(stop_reason=StopReason.CONTEXT_OVERFLOW, usage={"input_tokens": tokens})
            return
        if request.purpose == "compact":
            faultkit.record("summarize", turn_id)
            await faultkit.apoint("compact:mid")
            text = request.messages[0].text
            summary = f"Summary: {text.count('User:')} user messages, {len(text)} characters."
            yield ModelReply(text=summary, usage={"input_tokens": tokens, "output_tokens": len(summary) // 4})
            return
        mine = [m for m in request.messages if m.turn_id == turn_id]
        opening = next((m.text for m in mine if m.role in (Role.USER, Role.TRIGGER)), "")
        if opening.endswith(":tool") and not any(m.role == Role.TOOL for m in mine):
            yield ModelReply(
                tool_calls=(ToolCall(id=f"n-{turn_id[:8]}", name="compact_noop", input={}),),
                stop_reason=StopReason.TOOL_USE,
                usage={"input_tokens": tokens, "output_tokens": 5},
            )
            return
        text = f"Reply to {opening[:40]}: " + "lorem ipsum " * 12
        yield TextDelta(text[:20])
        yield TextDelta(text[20:])
        yield ModelReply(text=text, usage={"input_tokens": tokens, "output_tokens": len(text) // 4})


register("compactmodel", lambda agent: CompactModel())
