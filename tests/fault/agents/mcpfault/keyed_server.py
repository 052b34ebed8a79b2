"""A stdio MCP server for the MCP fault test: ``charge(item, turn)`` logs the idempotency key it
got in ``_meta`` to ``<JUNE_FAULT_DIR>/mcpkeys-<turn>``, pauses at the armed point ``mcp:during``
(the test kills the worker there), and dedupes on the key: a retried call charges nothing new."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("keyed")
ROOT = Path(os.environ["JUNE_FAULT_DIR"])


@server.tool()
async def charge(item: str, turn: str, ctx: Context) -> dict:
    """Charge once per idempotency key."""
    key = str((ctx.request_context.meta or {}).get("june/idempotency_key"))
    log = ROOT / f"mcpkeys-{turn}"
    seen = log.read_text().splitlines() if log.exists() else []
    with log.open("a") as f:
        f.write(key + "\n")
    arm = ROOT / "arm-mcp:during"
    if arm.exists():
        (ROOT / "at-mcp:during").write_text(str(os.getpid()))
        while arm.exists():
            await asyncio.sleep(0.02)
    return {"item": item, "charged": key not in seen}


if __name__ == "__main__":
    server.run()
