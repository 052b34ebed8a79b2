"""The agents' MCP servers in the admin (``…/dashboard/mcp/``, linked from the dashboard): each
server's state as ``manage.py june health --mcp`` says it — ``ok``, not reachable, or why its
tools are withheld (an ``approval`` or ``deny`` entry naming a tool the server does not offer:
the fail-closed rule of docs/tools.md, which the workers otherwise only log). The page connects to every
server when opened; what it found is kept a minute per process (a reload does not reconnect;
**Check again** does)."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin
from django.template.response import TemplateResponse

from agents_app import mcp
from sessions_app import wiring

#: seconds a check is shown before the page connects again
CACHE_SECONDS = 60.0
_last: dict[str, Any] = {"at": None, "found": {}}


def servers_status(*, fresh: bool = False) -> tuple[dict[str, str], float]:
    """``{"<agent>/<server>": "ok" | why not}`` and how many seconds ago it was found."""
    now = time.monotonic()
    if fresh or _last["at"] is None or now - _last["at"] > CACHE_SECONDS:
        _last["found"] = async_to_sync(mcp.status)(wiring.agents())
        _last["at"] = now
    return dict(_last["found"]), now - _last["at"]


def mcp_view(request):
    found, age = servers_status(fresh=request.method == "POST")
    rows = [
        {"name": name, "ok": state == "ok", "state": state, "withheld": "withheld" in state}
        for name, state in sorted(found.items())
    ]
    context = {
        **admin.site.each_context(request),
        "title": "MCP servers",
        "servers": rows,
        "problems": sum(1 for r in rows if not r["ok"]),
        "age": round(age),
    }
    return TemplateResponse(request, "admin/june/mcp_servers.html", context)
