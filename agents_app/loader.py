"""Agents are folders, found by convention:

    <name>/agent.py             optional: model, model_config, surfaces, schedules,
                                authorize_answer, settings, compaction, limits, mcp (MCP
                                servers whose tools join the agent's: agents_app/mcp),
                                placeholder and hints (the chat's composer),
                                retention (docs/privacy.md), authorize_takeover
                                (docs/operations.md "Takeover")
    <name>/instructions.md      the base system prompt
    <name>/instructions.<source>.md   per-source overlays
    <name>/tools/*.py           each module's Tool objects (``tool``, ``define_action``)

Folders come from ``agents_app/agents/`` (the demo agents: ``JUNE_DEMO_AGENTS``), the ``agents/``
folder of every installed app, and the JUNE_AGENT_DIRS setting.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from agents_app.mcp import sources_for
from agents_app.runtime.agent import Agent
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.tools import Tool

log = logging.getLogger(__name__)
BUILTIN_DIR = Path(__file__).resolve().parent / "agents"
#: a module is in sys.modules before its code has run: another thread must not read it half-run
_importing = threading.RLock()


def _import(path: Path, module_name: str) -> ModuleType:
    """Import an agent's file once per process; a thread asking meanwhile waits for the whole
    module (a worker's sweeper thread loads agents while its first attempt does: it used to get
    an agent.py without its ``model`` line run yet, and the turns of that worker went to the
    default model)."""
    with _importing:
        if module_name in sys.modules:
            return sys.modules[module_name]
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise AgentConfigError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules[module_name]
            raise
        return module


def load_agent(folder: Path, *, package: str = "june_agents") -> Agent:
    """The agent of ``folder``; its modules imported as ``<package>.<folder name>`` (another
    ``package``: the same agent at another revision, beside the site's: ``june_evals.agent_versions``)."""
    name = folder.name
    if not (folder / "instructions.md").exists() and not (folder / "agent.py").exists():
        raise AgentConfigError(f"{folder} is not an agent folder (no agent.py or instructions.md)")
    conf = _import(folder / "agent.py", f"{package}.{name}") if (folder / "agent.py").exists() else ModuleType(name)
    instructions = (folder / "instructions.md").read_text() if (folder / "instructions.md").exists() else ""
    overlays = {p.name[len("instructions.") : -len(".md")]: p.read_text() for p in folder.glob("instructions.*.md")}
    tools: dict[str, Tool] = {}
    for path in sorted((folder / "tools").glob("*.py")) if (folder / "tools").is_dir() else []:
        if path.name.startswith("_"):
            continue
        module = _import(path, f"{package}.{name}.tools.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, Tool):
                if value.name in tools and tools[value.name] is not value:
                    raise AgentConfigError(f"agent {name!r}: two tools named {value.name!r}")
                tools[value.name] = value
    return Agent(
        name=getattr(conf, "name", name),
        instructions=instructions,
        tools=tools,
        surfaces=dict(getattr(conf, "surfaces", {})),
        overlays=overlays,
        model=_model(name, getattr(conf, "model", None)),
        model_config=dict(getattr(conf, "model_config", {})),
        authorize_answer=getattr(conf, "authorize_answer", None),
        schedules=list(getattr(conf, "schedules", [])),
        settings=dict(getattr(conf, "settings", {})),
        compaction=getattr(conf, "compaction", None),
        limits=getattr(conf, "limits", None),
        sources=list(sources_for(name, getattr(conf, "mcp", None))),
        listed=bool(getattr(conf, "listed", True)),
        notify=getattr(conf, "notify", None) or {},
        placeholder=str(getattr(conf, "placeholder", "") or ""),
        hints=[str(hint) for hint in getattr(conf, "hints", ())],
        retention=getattr(conf, "retention", None) or {},
        authorize_takeover=getattr(conf, "authorize_takeover", None),
        batch=_batch(name, getattr(conf, "batch", False)),
    )


def _batch(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise AgentConfigError(f"agent {name!r}: batch must be True or False, not {value!r}")
    return value


def app_dirs(app_paths: Iterable[str | Path]) -> list[Path]:
    """The ``agents/`` folder of each installed app that has one (as the admin finds an app's
    ``admin.py``); June's own demo folder is not one of them (``discover(builtin=...)``)."""
    found = []
    for app_path in app_paths:
        folder = Path(app_path) / "agents"
        if folder.is_dir() and folder.resolve() != BUILTIN_DIR:
            found.append(folder)
    return found


def discover(dirs: Iterable[str | Path] = (), *, builtin: bool = True) -> dict[str, Agent]:
    """Every agent folder under the built-in directory (the demo agents, unless ``builtin`` is
    false) and ``dirs``."""
    agents: dict[str, Agent] = {}
    roots = list(dict.fromkeys(p.resolve() for p in [*([BUILTIN_DIR] if builtin else []), *map(Path, dirs)]))
    for root in roots:
        if not root.is_dir():
            log.warning("agent directory %s does not exist", root)
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))):
            if not ((folder / "agent.py").exists() or (folder / "instructions.md").exists()):
                continue
            agent = load_agent(folder)
            if agent.name in agents:
                raise AgentConfigError(f"two agents named {agent.name!r} ({folder})")
            agents[agent.name] = agent
    return agents


def _model(agent: str, declared: Any) -> str | tuple[str, ...] | None:
    """``model`` in agent.py: None, a name, or a list of names (a fallback list)."""
    if declared is None or isinstance(declared, str):
        return declared or None
    if isinstance(declared, (list, tuple)) and declared and all(isinstance(m, str) and m for m in declared):
        return tuple(declared)
    raise AgentConfigError(f"agent {agent!r}: model must be a provider name or a list of them, not {declared!r}")
