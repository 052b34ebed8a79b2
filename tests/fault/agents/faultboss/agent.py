"""Fault-test parent agent: model ``faultboss``. Opening ``fan:<n>[:<child text>]`` → one
``fan_out`` call that spawns n ``faultagent`` children in parallel (by default each: a sync write
and an async ping; ``slow:2`` makes each stream for 0.5 s), ``seq:<n>[:…]`` one after the other,
``fan:0`` a plain async tool call; then a reply naming the children's statuses. Pause point
``boss:resumed`` before that reply."""

from __future__ import annotations

from typing import AsyncIterator

from agents_app.providers import register
from agents_app.runtime.messages import Role, ToolCall
from agents_app.runtime.model import ModelReply, StopReason, TextDelta
from tests.fault import faultkit

model = "faultboss"


class BossModel:
    async def stream(self, request) -> AsyncIterator[object]:
        turn_id = request.stream_key.split(":", 1)[0]
        mine = [m for m in request.messages if m.turn_id == turn_id]
        opening = next((m.text for m in mine if m.role == Role.USER), "fan:2")
        last = mine[-1]
        if last.role == Role.TOOL:
            await faultkit.apoint("boss:resumed")
            text = "children: " + ",".join(r["status"] for r in last.result)
            yield TextDelta(text)
            yield ModelReply(text=text, stop_reason=StopReason.END_TURN, usage={"output_tokens": 1})
            return
        mode, _, rest = opening.partition(":")
        n, _, child = rest.partition(":")
        args = {"n": int(n or 2), "mode": "seq" if mode == "seq" else "all", "child": child or "item"}
        yield ModelReply(
            text="",
            tool_calls=(ToolCall(id="f1", name="fan_out", input=args),),
            stop_reason=StopReason.TOOL_USE,
            usage={"output_tokens": 1},
        )


register("faultboss", lambda agent: BossModel())
