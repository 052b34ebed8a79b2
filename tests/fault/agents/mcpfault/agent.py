"""MCP fault-test agent: model ``mcpfaultmodel`` calls ``keyed__charge`` (an MCP tool of the stdio
server beside this file) once, then answers ``outcome: charged`` or ``outcome: deduped`` from the
result it reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import AsyncIterator

from agents_app.providers import register
from agents_app.runtime.messages import Role, ToolCall
from agents_app.runtime.model import ModelReply, StopReason

model = "mcpfaultmodel"
mcp = [
    {
        "name": "keyed",
        "command": [sys.executable, str(Path(__file__).with_name("keyed_server.py"))],
        "env": {"JUNE_FAULT_DIR": "${JUNE_FAULT_DIR}"},
        "timeout": 60,
    }
]


class McpFaultModel:
    async def stream(self, request) -> AsyncIterator[object]:
        turn_id = request.stream_key.split(":", 1)[0]
        mine = [m for m in request.messages if m.turn_id == turn_id]
        if not any(m.role == Role.ASSISTANT for m in mine):
            yield ModelReply(
                text="",
                tool_calls=(ToolCall(id="m1", name="keyed__charge", input={"item": "card", "turn": turn_id}),),
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


register(model, lambda config: McpFaultModel())
