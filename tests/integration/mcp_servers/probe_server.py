"""An MCP server for the tests (stdio by default; ``http <port>`` for streamable HTTP).

Tools: ``echo`` (text), ``point`` (structured), ``fail`` (an error result), ``slow`` (sleeps),
``die`` (the process exits mid-call), ``meta`` (the request's _meta as it arrived), ``auth``
(the HTTP request's Authorization header), and
``grow`` (adds ``later`` and says the list changed), ``extra`` only when the file named by PROBE_EXTRA exists at start (a changed tool list)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("probe")
CALLS = Path(os.environ["PROBE_CALLS"]) if os.environ.get("PROBE_CALLS") else None


def _log(line: str) -> None:
    if CALLS is not None:
        with CALLS.open("a") as f:
            f.write(line + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say it back."""
    return f"echo: {text}"


@server.tool()
def point(x: int, y: int) -> dict:
    """A structured answer."""
    return {"x": x, "y": y, "sum": x + y}


@server.tool()
def fail(reason: str) -> str:
    """Always an error result."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def slow(seconds: float) -> str:
    """Sleeps (blocking the server)."""
    time.sleep(seconds)
    return "woke"


@server.tool()
def die() -> str:
    """The server process exits in the middle of the call."""
    os._exit(3)


@server.tool()
def meta(ctx: Context) -> dict:
    """The idempotency key June sent in _meta (and logs the call to PROBE_CALLS)."""
    key = (ctx.request_context.meta or {}).get("june/idempotency_key")
    _log(str(key))
    return {"key": key, "secret": os.environ.get("PROBE_SECRET", "")}


@server.tool()
def auth(ctx: Context) -> dict:
    """The Authorization header the HTTP request carried ("" over stdio)."""
    request = ctx.request_context.request
    return {"authorization": request.headers.get("authorization", "") if request is not None else ""}


async def later() -> str:
    """Added while the server runs (by ``grow``)."""
    return "later"


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool ``later`` and notifies the client that the tool list changed."""
    server.add_tool(later)
    await ctx.notify_tools_changed()  # 2026-07-28: to `subscriptions/listen` streams
    await ctx.session.send_tool_list_changed()  # older clients: the notification
    return "grown"


if os.environ.get("PROBE_EXTRA") and Path(os.environ["PROBE_EXTRA"]).exists():

    @server.tool()
    def extra() -> str:
        """Only in the changed list."""
        return "extra"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
