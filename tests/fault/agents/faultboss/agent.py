"""Fault-test parent agent: model ``faultboss``. Opening ``fan:<n>`` → one ``fan_out`` call that
spawns n ``faultagent`` children in parallel (each: a sync write and an async ping), then a
reply naming the children's statuses. Pause point ``fanout:<run>`` in the tool (run = how many
times the tool started for this turn, from 1)."""

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
        n = int(opening.split(":", 1)[1]) if opening.startswith("fan:") else 2
        yield ModelReply(text="", tool_calls=(ToolCall(id="f1", name="fan_out", input={"n": n}),),
                         stop_reason=StopReason.TOOL_USE, usage={"output_tokens": 1})


register("faultboss", lambda agent: BossModel())
