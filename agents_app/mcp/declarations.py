"""An agent's ``mcp = [...]`` declarations, checked when the agent loads (a typo fails the load,
never a turn). Secrets stay in the environment: a value ``"${NAME}"`` in ``env`` or ``headers``
is read from the process's environment when the server is connected, never stored. The defaults
(``JUNE_MCP_TIMEOUT``, ``JUNE_MCP_TOOLS_TTL``) are Django settings, read when the agent loads."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents_app.runtime.errors import AgentConfigError

NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
#: between a server's name and its tool's in the name the model sees (``crm__find_customer``)
SEPARATOR = "__"
KEYS = {"name", "command", "url", "env", "headers", "allow", "deny", "timeout", "cwd", "approval"}
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: tuple[str, ...] = ()
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    #: seconds a call may take (the entry's ``timeout``, else JUNE_MCP_TIMEOUT)
    timeout: float = 30.0
    cwd: str | None = None
    #: tool name (or "*": all) -> its declared approval (agents_app/runtime/approval.py)
    approval: dict[str, Any] = field(default_factory=dict)
    #: seconds its tool list is kept before it is fetched again (JUNE_MCP_TOOLS_TTL)
    tools_ttl: float = 300.0

    def offers(self, tool: str) -> bool:
        return tool not in self.deny and (self.allow is None or tool in self.allow)

    def misnamed(self, listed: set[str]) -> str:
        """What is wrong with the entry given the tools the server lists ("" when nothing): an
        ``approval`` or ``deny`` entry naming no tool of the server is a typo that would let the
        tool it meant run unapproved (or at all)."""
        wrong = {
            "approval": sorted(set(self.approval) - {"*"} - listed),
            "deny": sorted(self.deny - listed),
        }
        found = "; ".join(
            f"{key} names tools the server does not offer: {names}" for key, names in wrong.items() if names
        )
        return f"MCP server {self.name!r}: {found} (its tools are withheld until the entry is fixed)" if found else ""

    def resolved_env(self) -> dict[str, str]:
        return {k: expand(v) for k, v in self.env.items()}

    def resolved_headers(self) -> dict[str, str]:
        return {k: expand(v) for k, v in self.headers.items()}


def expand(value: str) -> str:
    """``"${NAME}"`` (anywhere in the value) from the environment; unset: empty."""
    return ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), value)


def parse_servers(agent: str, entries: Any) -> list[ServerConfig]:
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        raise AgentConfigError(f"agent {agent!r}: mcp must be a list of server entries")
    servers: list[ServerConfig] = []
    for entry in entries:
        servers.append(_server(agent, entry))
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise AgentConfigError(f"agent {agent!r}: two MCP servers share a name")
    return servers


def _server(agent: str, entry: Any) -> ServerConfig:
    where = f"agent {agent!r}: mcp entry"
    if not isinstance(entry, dict):
        raise AgentConfigError(f"{where} must be a dict, not {type(entry).__name__}")
    unknown = set(entry) - KEYS
    if unknown:
        raise AgentConfigError(f"{where} {entry.get('name')!r}: unknown keys {sorted(unknown)}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise AgentConfigError(f"{where}: name must match {NAME.pattern}, not {name!r}")
    if SEPARATOR in name or name.endswith("_"):
        raise AgentConfigError(
            f"{where}: name {name!r} must not contain {SEPARATOR!r} nor end with '_' ({SEPARATOR!r} separates "
            "the server's name from its tool's in the names the model sees)"
        )
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise AgentConfigError(f"{where} {name!r}: give exactly one of command (stdio) or url (HTTP)")
    if command is not None and (
        not isinstance(command, (list, tuple)) or not command or not all(isinstance(c, str) and c for c in command)
    ):
        raise AgentConfigError(f"{where} {name!r}: command must be a non-empty list of strings")
    if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
        raise AgentConfigError(f"{where} {name!r}: url must be an http(s) URL")
    maps = {}
    for key in ("env", "headers"):
        value = entry.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise AgentConfigError(f"{where} {name!r}: {key} must map strings to strings")
        maps[key] = dict(value)
    lists = {}
    for key in ("allow", "deny"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value)):
            raise AgentConfigError(f"{where} {name!r}: {key} must be a list of tool names")
        lists[key] = frozenset(value) if value is not None else None
    timeout = entry.get("timeout", settings.JUNE_MCP_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise AgentConfigError(f"{where} {name!r}: timeout must be a number of seconds in (0, 3600]")
    approvals = entry.get("approval", {})
    if not isinstance(approvals, dict) or not all(isinstance(k, str) for k in approvals):
        raise AgentConfigError(f"{where} {name!r}: approval must map tool names (or '*') to an approval")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise AgentConfigError(f"{where} {name!r}: cwd must be a string")
    return ServerConfig(
        name=name,
        command=tuple(command or ()),
        url=url or "",
        env=maps["env"],
        headers=maps["headers"],
        allow=lists["allow"],
        deny=lists["deny"] or frozenset(),
        timeout=float(timeout),
        cwd=cwd,
        approval=dict(approvals),
        tools_ttl=float(settings.JUNE_MCP_TOOLS_TTL),
    )
