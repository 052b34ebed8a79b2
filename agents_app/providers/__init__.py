"""Model implementations, chosen per agent: ``anthropic`` (the only module importing the SDK),
``demo`` (offline and deterministic) and ``scripted`` (tests).

Default: ``anthropic`` when ANTHROPIC_API_KEY is set, else ``demo``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from agents_app.runtime.agent import Agent
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.seams import Model

#: name -> factory(agent) ; tests register scripted models here
_FACTORIES: dict[str, Callable[[Agent], Model]] = {}


def register(name: str, factory: Callable[[Agent], Model]) -> None:
    _FACTORIES[name] = factory


def unregister(name: str) -> None:
    _FACTORIES.pop(name, None)


def provider_name(agent: Agent) -> str:
    override = os.environ.get("JUNE_MODEL")
    if override:
        return override
    if agent.model:
        return agent.model
    return "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "demo"


def model_for(agent: Agent) -> Model:
    name = provider_name(agent)
    if name in _FACTORIES:
        return _FACTORIES[name](agent)
    if name == "demo":
        from .demo import DemoModel  # imported when chosen, like the SDK below

        return DemoModel(**_demo_options(agent))
    if name == "anthropic":
        from .anthropic import from_settings  # imported here: only a site that uses it loads the SDK

        return from_settings(dict(agent.model_config))
    raise AgentConfigError(f"agent {agent.name!r}: unknown model provider {name!r}")


def _demo_options(agent: Agent) -> dict[str, Any]:
    delay = os.environ.get("JUNE_DEMO_DELAY")
    return {"delay": float(delay)} if delay else {}
