"""A test agent for the runner's tests (tests/integration/test_runner.py): model ``loadmodel``
(registered at import). Turn shape by the opening text:

    "nap:<s>"    model -> ``nap`` (async tool, sleeps s seconds) -> model
    "block:<s>"  model -> ``block`` (sync tool: ``time.sleep(s)``, holding its thread) -> model
    "blockdb:<s>" the same after a query on its thread's connection, inside the step's
                 transaction (on SQLite: holding the database's write lock meanwhile)
    "burn:<s>"   model -> ``burn`` (async tool that holds the event loop for s seconds of CPU:
                 what no turn should do, to measure what it costs the others) -> model
    "spin:<s>"   model -> ``spin`` (async tool that computes s seconds on the loop a millisecond
                 at a time, letting the other turns run between) -> model
    "quick"      (anything else) the model streams 5 deltas 10 ms apart and answers
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from agents_app.providers import register
from agents_app.runtime.messages import Role, ToolCall
from agents_app.runtime.model import ModelReply, StopReason, TextDelta

model = "loadmodel"

TOOLS = {"nap": "nap", "block": "block", "blockdb": "blockdb", "burn": "burn", "spin": "spin"}


class LoadModel:
    async def stream(self, request) -> AsyncIterator[object]:
        turn_id = request.stream_key.split(":", 1)[0]
        mine = [m for m in request.messages if m.turn_id == turn_id]
        k = sum(1 for m in mine if m.role == Role.ASSISTANT)
        opening = next((m.text for m in mine if m.role in (Role.USER, Role.TRIGGER)), "")
        kind, _, arg = opening.partition(":")
        usage = {"input_tokens": 1, "output_tokens": 1}
        if kind in TOOLS and k == 0:
            yield ModelReply(
                text="",
                tool_calls=(ToolCall(id="c1", name=TOOLS[kind], input={"seconds": float(arg)}),),
                stop_reason=StopReason.TOOL_USE,
                usage=usage,
            )
            return
        for piece in ("one ", "two ", "three ", "four ", "five"):
            await asyncio.sleep(0.01)
            yield TextDelta(piece)
        yield ModelReply(text="one two three four five", stop_reason=StopReason.END_TURN, usage=usage)


register("loadmodel", lambda agent: LoadModel())
