"""An agent: instructions, tools, per-source policies and hooks.

Per-source turn policies: ``instructions.md`` plus ``instructions.<source>.md`` (appended by
default; ``mode: "replace"`` makes it the whole prompt) and ``deny_tools`` removed in code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Protocol

from .compaction import Compaction, compaction_config
from .errors import AgentConfigError
from .keeping import retention_config
from .limits import Limits, limits_config
from .model import ToolSpec
from .notify import notify_config
from .tools import Tool

log = logging.getLogger(__name__)

AuthorizeAnswer = Callable[..., Awaitable[bool] | bool]

#: the sources whose turns may batch their model calls (``batch = True``): nobody waits on them
#: live. A chat turn (web, http, cli) and a subagent's (spawn) never batch
BATCH_SOURCES = ("schedule", "webhook")


class ToolSource(Protocol):
    """Tools from outside the agent's folder (an MCP server: ``agents_app.mcp``), asked at the
    start of every turn. ``tools()`` never raises: a source it cannot reach offers nothing new."""

    async def tools(self) -> tuple[dict[str, Tool], frozenset[str]]:
        """(every tool it has offered in this process, by name; the names it offers now). A turn
        that replays a call to a tool no longer offered still finds it among the first."""
        ...


@dataclass(frozen=True, slots=True)
class SurfacePolicy:
    mode: str = "append"  # append | replace
    deny_tools: tuple[str, ...] = ()


@dataclass(slots=True)
class Agent:
    name: str
    instructions: str = ""
    tools: dict[str, Tool] = field(default_factory=dict)
    #: source -> policy; overlays hold each ``instructions.<source>.md``
    surfaces: dict[str, SurfacePolicy] = field(default_factory=dict)
    overlays: dict[str, str] = field(default_factory=dict)
    #: provider name (anthropic | bedrock | vertex | demo | scripted), ``<provider>:<model id>``,
    #: a tuple of those (a fallback list, first first), or None for the default
    model: str | tuple[str, ...] | None = None
    model_config: dict[str, Any] = field(default_factory=dict)
    authorize_answer: AuthorizeAnswer | None = None
    schedules: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    #: compaction settings (``compaction`` in agent.py: a dict, or False to turn it off)
    compaction: Compaction = field(default_factory=Compaction)
    #: what one turn may spend (``limits`` in agent.py; None: the site's defaults)
    limits: Limits | None = None
    #: tools from outside the folder (``mcp`` in agent.py), merged in at each turn's start
    sources: list[ToolSource] = field(default_factory=list)
    #: offered to people on the chat's home page (``listed = False``: an agent only other agents
    #: start, as a subagent, or only channels reach)
    listed: bool = True
    #: where its parks' notifications go (``notify`` in agent.py, ``runtime.notify``)
    notify: dict[str, Any] = field(default_factory=dict)
    #: the chat's composer: its placeholder (``placeholder`` in agent.py; default "Message
    #: <name>…") and what to try (``hints``: short messages, shown after it)
    placeholder: str = ""
    hints: list[str] = field(default_factory=list)
    #: who may take its sessions over (``authorize_takeover(*, session, principal)`` in agent.py:
    #: exactly True grants; None: nobody)
    authorize_takeover: AuthorizeAnswer | None = None
    #: how long its conversations are kept (``retention`` in agent.py, ``runtime.keeping``)
    retention: dict[str, Any] = field(default_factory=dict)
    #: its schedule and webhook turns send their model calls through the Message Batches API,
    #: at the batch price, parked while the batch runs (``batch`` in agent.py; docs/providers.md)
    batch: bool = False

    def __post_init__(self) -> None:
        self.notify = notify_config(self.name, self.notify)
        self.retention = retention_config(self.retention, owner=f"agent {self.name!r}")
        self.compaction = compaction_config(self.compaction)
        self.limits = limits_config(self.limits)
        if isinstance(self.tools, (list, tuple)):
            self.tools = {t.name: t for t in self.tools}
        self.surfaces = {k: v if isinstance(v, SurfacePolicy) else surface(**v) for k, v in self.surfaces.items()}
        for source, policy in self.surfaces.items():
            if policy.mode not in ("append", "replace"):
                raise AgentConfigError(f"agent {self.name!r}: surface {source!r} has unknown mode {policy.mode!r}")
            if policy.mode == "replace" and source not in self.overlays:
                raise AgentConfigError(
                    f"agent {self.name!r}: surface {source!r} uses mode 'replace' but "
                    f"instructions.{source}.md is missing"
                )
            unknown = set(policy.deny_tools) - set(self.tools)
            if unknown:
                log.warning("agent %s: surface %s denies unknown tools %s", self.name, source, sorted(unknown))

    def policy_for(self, source: str | None) -> dict[str, Any]:
        """The surface policy of a turn from ``source``: its system prompt and denied tools."""
        policy = self.surfaces.get(source or "", SurfacePolicy())
        overlay = self.overlays.get(source or "")
        if overlay is not None and policy.mode == "replace":
            system = overlay
        elif overlay is not None:
            system = "\n\n".join(p for p in (self.instructions.strip(), overlay.strip()) if p)
        else:
            system = self.instructions
        found: dict[str, Any] = {
            "source": source,
            "mode": policy.mode,
            "system": system,
            "deny_tools": list(policy.deny_tools),
        }
        if self.batch and source in BATCH_SOURCES:
            found["batch"] = True
        return found

    def tools_for(self, policy: dict[str, Any] | None) -> dict[str, Tool]:
        denied = set((policy or {}).get("deny_tools", ()))
        return {name: t for name, t in self.tools.items() if name not in denied}

    def specs_for(self, policy: dict[str, Any] | None) -> tuple[ToolSpec, ...]:
        return tuple(t.spec for t in self.tools_for(policy).values())

    async def tools_for_turn(self, policy: dict[str, Any] | None) -> tuple[dict[str, Tool], tuple[ToolSpec, ...]]:
        """(the tools a turn may call, the specs it shows the model): the folder's and its
        sources', less the policy's denied ones. A source's tool it no longer offers is callable
        (a replay of a call made before the list changed) but not shown."""
        tools = self.tools_for(policy)
        if not self.sources:
            return tools, tuple(t.spec for t in tools.values())
        denied = set((policy or {}).get("deny_tools", ()))
        shown = [t.spec for t in tools.values()]
        for source in self.sources:
            known, offered = await source.tools()
            for name, found in known.items():
                if name in denied or name in tools:
                    continue
                tools[name] = found
                if name in offered:
                    shown.append(found.spec)
        return tools, tuple(shown)

    def warn_unused_surfaces(self, sources: Iterable[str]) -> list[str]:
        """Log (and return) policies for sources no mounted channel emits."""
        unused = sorted(set(self.surfaces) - set(sources))
        for source in unused:
            log.warning("agent %s: surface policy for source %r, which no mounted channel emits", self.name, source)
        return unused


def surface(mode: str = "append", deny_tools: Iterable[str] = ()) -> SurfacePolicy:
    return SurfacePolicy(mode=mode, deny_tools=tuple(deny_tools))
