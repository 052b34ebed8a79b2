"""The demo's MCP server (stdio, no network): a small inventory the ``ops`` agent reaches as
``inventory__count`` and ``inventory__reserve`` (agent.py's ``mcp``; docs/tools.md).

Run by the worker as a subprocess, one per worker process. ``reserve`` dedupes on the
idempotency key June sends in the request's ``_meta`` (``june/idempotency_key``): a call June
retries after a crash reserves once."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("inventory", instructions="A small warehouse inventory.")
STOCK = {"tea": 40, "mugs": 12, "pears": 0, "coffee": 25}
RESERVED: dict[str, dict] = {}


@server.tool()
def count(item: str) -> dict:
    """How many of an item the warehouse holds."""
    return {"item": item, "in_stock": STOCK.get(item.lower(), 0)}


@server.tool()
def reserve(item: str, quantity: int, ctx: Context) -> dict:
    """Reserve some of an item (once per idempotency key)."""
    key = str((ctx.request_context.meta or {}).get("june/idempotency_key") or "")
    if key and key in RESERVED:
        return {**RESERVED[key], "deduplicated": True}
    have = STOCK.get(item.lower(), 0)
    if quantity < 1 or quantity > have:
        raise ToolError(f"cannot reserve {quantity} {item}: {have} in stock")  # the model reads it
    STOCK[item.lower()] = have - quantity
    RESERVED[key] = {"item": item, "reserved": quantity, "left": have - quantity}
    return RESERVED[key]


if __name__ == "__main__":
    server.run()
