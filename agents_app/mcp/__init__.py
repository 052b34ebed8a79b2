"""MCP servers as tool sources (docs/tools.md): an agent declares them in ``agent.py``::

    mcp = [
        {"name": "files", "command": ["python", "-m", "files_server"], "env": {"ROOT": "${FILES_ROOT}"}},
        {"name": "crm", "url": "https://crm.internal/mcp", "headers": {"Authorization": "Bearer ${CRM_TOKEN}"},
         "allow": ["find_customer"], "timeout": 20},
    ]

Their tools join the agent's as ``<server>__<tool>``: async, at-least-once tools (the call's
idempotency key goes to the server in the request's ``_meta``). A server that is down, slow or
answers garbage gives the model an error result; the turn goes on. ``declarations`` reads the
declarations, ``source`` talks to the servers, ``tool_results`` turns their answers into tool
results. The ``mcp`` SDK is imported only by a process that calls a server."""

from .declarations import ServerConfig, parse_servers
from .source import McpSource, sources_for, status, warm

__all__ = ["McpSource", "ServerConfig", "parse_servers", "sources_for", "status", "warm"]
