"""Model implementations, chosen per agent: ``anthropic`` (the only module importing the SDK),
``demo`` (offline and deterministic) and ``scripted`` (tests).

Default: ``anthropic`` when ANTHROPIC_API_KEY is set, else ``demo``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import sys
import weakref
from typing import Any, AsyncIterator, Callable, Iterable

from django.conf import settings

from agents_app.runtime.agent import Agent
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.seams import Model

#: the ``anthropic`` provider's context window when ``agent.py`` sets none (tokens)
ANTHROPIC_CONTEXT_WINDOW = 200_000

#: name -> factory(agent) ; tests register scripted models here
_FACTORIES: dict[str, Callable[[Agent], Model]] = {}
#: registered providers an agent's ``model`` names even under ``JUNE_MODEL`` (an eval's version
#: whose model is a cassette or a script: the run's explicit choice, not the site's default)
_PINNED: set[str] = set()


def register(name: str, factory: Callable[[Agent], Model], *, pinned: bool = False) -> None:
    _FACTORIES[name] = factory
    if pinned:
        _PINNED.add(name)


def unregister(name: str) -> None:
    _FACTORIES.pop(name, None)
    _PINNED.discard(name)


#: where a Claude model is reached (``platforms``): Anthropic's API, AWS Bedrock, Google Vertex AI
CLAUDE_PLATFORMS = ("anthropic", "bedrock", "vertex")


def _declared(agent: Agent) -> tuple[str, ...]:
    if isinstance(agent.model, str) and agent.model.partition(":")[0] in _PINNED:
        return (agent.model,)
    override = settings.JUNE_MODEL
    if override:
        return (override,)
    if agent.model:
        return agent.model if isinstance(agent.model, tuple) else (agent.model,)
    # the anthropic SDK's own variable (it reads it itself): set, the SDK can be used
    return ("anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "demo",)


def provider_name(agent: Agent) -> str:
    """The provider of the agent's (first) model: ``anthropic``, ``bedrock``, ``vertex``, ``demo``
    or a registered name."""
    return _declared(agent)[0].partition(":")[0]


def claude_models(agent: Agent) -> list[tuple[str, str | None]]:
    """``(platform, model id or None for the configured one)`` per Claude model the agent names,
    in fallback order; ``[]`` when its model is not Claude's (the demo, a registered one)."""
    declared = _declared(agent)
    found: list[tuple[str, str | None]] = []
    for spec in declared:
        platform, _, model = spec.partition(":")
        if platform not in CLAUDE_PLATFORMS:
            if len(declared) > 1:
                raise AgentConfigError(
                    f"agent {agent.name!r}: a fallback list names Claude platforms only, not {spec!r}"
                )
            return []
        found.append((platform, model or None))
    return found


#: the environment a Claude model reads when it is built (``anthropic.AnthropicModel``)
_CLIENT_ENVIRON = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
#: the Claude models ``model_for`` built, per event loop (their clients are the loop's) and agent
#: name: (what each was built from — the agent's model and settings, the loop's kind, the
#: environment — and the model); one whose basis changed (a reloaded agent, a new key) is built again
_BUILT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, tuple[tuple[Any, ...], Model]]] = (
    weakref.WeakKeyDictionary()
)


def model_for(agent: Agent) -> Model:
    """The agent's model for a turn. A Claude model is built once per agent and event loop and
    then handed to each of its turns (``_BUILT``): it holds no turn's state, and building it
    validates the settings, sets up the prompt cache and looks its client up. A registered
    factory is called every time (a test's scripted model is its own per turn)."""
    declared = _declared(agent)
    name = declared[0].partition(":")[0]
    if name in _FACTORIES:
        return _FACTORIES[name](agent)
    if name == "demo":
        from .demo import DemoModel  # imported when chosen, like the SDK below

        return DemoModel(**_demo_options(agent))
    if name not in CLAUDE_PLATFORMS:
        raise AgentConfigError(f"agent {agent.name!r}: unknown model provider {name!r}")
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # outside a loop: a model (and a client) of its own, as before
        return _claude_model(agent)
    basis = (declared, agent.model_config, loop in _LONG_LIVED, *map(os.environ.get, _CLIENT_ENVIRON))
    built = _BUILT.get(loop)
    if built is None:
        built = _BUILT[loop] = {}
    found = built.get(agent.name)
    if found is not None and found[0] == basis:
        return found[1]
    model = _claude_model(agent)
    # the settings copied: an agent whose ``model_config`` is changed in place gets a new model
    built[agent.name] = ((declared, copy.deepcopy(agent.model_config), *basis[2:]), model)
    return model


def _claude_model(agent: Agent) -> Model:
    from .fallback import claude_model  # imported here: only a site that uses it loads the SDK

    return claude_model(agent.name, claude_models(agent), dict(agent.model_config))


def context_window(agent: Agent) -> int | None:
    """The agent's model context window in tokens, known without building the model: building
    it would import the SDK (docs/workers.md says what that costs) in a web process, or call a
    test's factory. The compaction setting first (what the engine compacts against), else the
    provider's; None for a provider whose window cannot be known this way (a registered factory)."""
    if agent.compaction.context_window:
        return int(agent.compaction.context_window)
    name = provider_name(agent)
    if name in CLAUDE_PLATFORMS:
        window = agent.model_config.get("context_window", ANTHROPIC_CONTEXT_WINDOW)
        return window if isinstance(window, int) and window > 0 else ANTHROPIC_CONTEXT_WINDOW
    if name == "demo":
        from .demo import CONTEXT_WINDOW

        return CONTEXT_WINDOW
    return None


def warm(agents: Iterable[Agent]) -> list[str]:
    """Import the SDKs the agents' providers need, now. A worker calls it before its cluster
    forks: the ``anthropic`` SDK's import is slow, and paid in each worker on its first turn it
    held that worker's event loop, with every turn on it, for as long (docs/workers.md). Returns
    the providers imported; an unknown one is left for ``model_for`` to report."""
    names = sorted({provider_name(agent) for agent in agents})
    if set(names) & set(CLAUDE_PLATFORMS):
        from . import anthropic  # noqa: F401  (the import is the point)
    if "demo" in names:
        from . import demo  # noqa: F401
    return names


#: the event loops that live as long as their process (a worker's runner, ``long_lived_loop``)
_LONG_LIVED: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def is_long_lived(loop: asyncio.AbstractEventLoop) -> bool:
    return loop in _LONG_LIVED


@contextlib.asynccontextmanager
async def long_lived_loop() -> AsyncIterator[None]:
    """The running loop lives as long as its process (a worker's runner) and says so: the
    ``anthropic`` provider's clients on it use aiohttp's transport (the SDK's ``aiohttp``
    extra; less CPU per streamed call than the default one: ``bench/bench_transport.py``),
    which must be closed on the loop that opened it. They are, when the block ends. A loop
    that runs one turn and ends (``asyncio.run``, a test) keeps the default transport, which
    needs no closing."""
    loop = asyncio.get_running_loop()
    _LONG_LIVED.add(loop)
    try:
        yield
    finally:
        _LONG_LIVED.discard(loop)
        _BUILT.pop(loop, None)  # their clients are closed below
        provider = sys.modules.get(f"{__name__}.anthropic")
        if provider is not None:
            await provider.close_clients(loop)


def _demo_options(agent: Agent) -> dict[str, Any]:
    paces = {"delay": settings.JUNE_DEMO_DELAY, "essay_delay": settings.JUNE_DEMO_ESSAY_DELAY}
    return {name: float(pace) for name, pace in paces.items() if pace is not None}
