"""MCP fault-test agent for the demo inventory: model ``mcpinventorymodel`` calls
``inventory__reserve`` (3 tea) once (``inventory__count`` for tea when the user writes
``count``: a warm-up), then answers ``outcome: <the result it read>``. The server is
the demo's (agents_app/agents/ops/inventory_server.py) behind ``paused_server.py``, which pauses
after a reservation at the armed point ``inventory:after`` (the test kills the worker there) and
logs each server process's pid."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import AsyncIterator

from agents_app.providers import register
from agents_app.runtime.messages import Role, ToolCall
from agents_app.runtime.model import ModelReply, StopReason

model = "mcpinventorymodel"
mcp = [
    {
        "name": "inventory",
        "command": [sys.executable, str(Path(__file__).with_name("paused_server.py"))],
        "env": {"JUNE_FAULT_DIR": "${JUNE_FAULT_DIR}"},
        "timeout": 60,
    }
]


class McpInventoryModel:
    async def stream(self, request) -> AsyncIterator[object]:
        turn_id = request.stream_key.split(":", 1)[0]
        mine = [m for m in request.messages if m.turn_id == turn_id]
        if not any(m.role == Role.ASSISTANT for m in mine):
            asked = next((m.text for m in mine if m.role == Role.USER), "")
            call = (
                ToolCall(id="c1", name="inventory__count", input={"item": "tea"})
                if asked == "count"
                else ToolCall(id="r1", name="inventory__reserve", input={"item": "tea", "quantity": 3})
            )
            yield ModelReply(
                text="",
                tool_calls=(call,),
                stop_reason=StopReason.TOOL_USE,
                usage={"input_tokens": 1, "output_tokens": 1},
            )
            return
        result = next((m.result for m in reversed(mine) if m.role == Role.TOOL), None)
        yield ModelReply(
            text="outcome: " + json.dumps(result, sort_keys=True)[:500],
            stop_reason=StopReason.END_TURN,
            usage={"input_tokens": 1, "output_tokens": 1},
        )


register(model, lambda config: McpInventoryModel())
