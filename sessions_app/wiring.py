"""The composition root: the runtime wired to the Django store, the outbox sinks and django-q2.

The one module that knows which store, sinks, dispatcher and agents the site runs with. Agents
are discovered once per process from their folders (``JUNE_AGENT_DIRS`` adds more)."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Callable

from asgiref.sync import sync_to_async
from django.conf import settings

from agents_app.loader import app_dirs, discover
from agents_app.providers import model_for, provider_name
from agents_app.runtime import Agent, Runtime, limits
from agents_app.runtime.errors import NotFound
from agents_app.runtime.executor import TurnExecutor
from agents_app.runtime.seams import EventSink
from agents_app.runtime.session import Dispatcher, FanoutSink
from sessions_app import telemetry
from sessions_app.outbox.deliveries import DeliverySink
from sessions_app.outbox.queue import enqueue_turn
from sessions_app.outbox.sink import ChannelsEventSink
from sessions_app.store import DjangoSessionStore
from sessions_app.store.batch_model import batching

#: the sources the site's mounted channels emit (a policy for any other source logs a warning)
MOUNTED_SOURCES = ("web", "http", "webhook", "schedule", "cli")
#: what a version of an agent is called (``<agent>@<id>``): no folder's name has the mark
VERSION_MARK = "@"
#: resolvers of versions' names (an eval's agent at a git revision, or with a recorded model:
#: ``june_evals.agent_versions``), asked in order; each returns the Agent, or None for a name not its
_RESOLVERS: list[Callable[[str], Agent | None]] = []


def resolve_versions_with(resolver: Callable[[str], Agent | None]) -> None:
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)


class Agents(dict[str, Agent]):
    """The site's agents by name (what its folders define: iterated, listed); a version's name
    is resolved when asked for (``agents()[name]``: the engine's and the workers' lookup), and
    never listed."""

    def __missing__(self, name: str) -> Agent:
        if VERSION_MARK in name:
            for resolve in _RESOLVERS:
                found = resolve(name)
                if found is not None:
                    return found
        raise KeyError(name)


def agent_dirs() -> list[Path]:
    """Where the site's agent folders are: the installed apps' ``agents/`` folders, then
    ``JUNE_AGENT_DIRS`` (the demo agents' folder is ``loader.BUILTIN_DIR``)."""
    from django.apps import apps

    return [*app_dirs(app.path for app in apps.get_app_configs()), *map(Path, settings.JUNE_AGENT_DIRS)]


@functools.cache
def agents() -> Agents:
    limits.set_defaults(settings.JUNE_TURN_LIMITS)  # for the agents that declare none
    found = discover(agent_dirs(), builtin=settings.JUNE_DEMO_AGENTS)
    for definition in found.values():
        definition.warn_unused_surfaces(MOUNTED_SOURCES)
    return Agents(found)


def agent(name: str, *, versions: bool = True) -> Agent:
    """The agent ``name`` (NotFound if the site has none). ``versions=False``: a folder's agent
    only — a version (``<agent>@<id>``, an eval's) is run by its eval, never reached by people."""
    if not versions and VERSION_MARK in name:
        raise NotFound(f"no agent named {name!r}")
    try:
        return agents()[name]
    except KeyError:
        raise NotFound(f"no agent named {name!r}") from None


def store(*, own_connection: bool = True, inline: bool = False) -> DjangoSessionStore:
    return DjangoSessionStore(own_connection=own_connection, inline=inline)


def sink(*, background: bool = False) -> ChannelsEventSink:
    """The Channels layer sink. ``background``: layer sends leave the turn's critical path (a
    worker's loop; close() it)."""
    return ChannelsEventSink(background=background)


def executor(*, extra_sinks: tuple[EventSink, ...] = (), store: DjangoSessionStore | None = None) -> TurnExecutor:
    """``store``: a worker's runner passes its own (its pipes and threads); else a new one."""
    return TurnExecutor(
        store=store if store is not None else DjangoSessionStore(),
        sink=FanoutSink(sink(background=True), DeliverySink(), *extra_sinks),
        agent_for=agent,
        model_for=batching(model_for, max_attempts=settings.JUNE_MAX_ATTEMPTS),
        clock=time.time,
        lease_seconds=settings.JUNE_LEASE_SECONDS,
        max_attempts=settings.JUNE_MAX_ATTEMPTS,
        on_runnable=enqueue_runnable,
        max_depth=settings.JUNE_SUBAGENT_MAX_DEPTH,
        max_fanout=settings.JUNE_SUBAGENT_MAX_FANOUT,
        observer=telemetry.observer(model_of=agent_model),
    )


async def enqueue_runnable(runnable: list[tuple[str, Any]]) -> None:
    """A worker's units made turns runnable (spawned children, a woken parent): to django-q2.
    A lost enqueue is found by the sweeper's pass over queued turns."""
    for turn_id, _ in runnable:
        await sync_to_async(enqueue_turn)(turn_id)


def runtime(
    *,
    dispatcher: Dispatcher,
    extra_sinks: tuple[EventSink, ...] = (),
    own_connection: bool = True,
    inline: bool = False,
) -> Runtime:
    """A Runtime over the Django store. ``dispatcher``: who drives its turns (the services' hands
    them to django-q2 after the call; the CLI and schedules drive them in-process).
    ``own_connection``, ``inline``: as ``DjangoSessionStore``'s (the services pass False, and
    ``inline`` for the calls they drive on their own thread)."""
    return Runtime(
        store=store(own_connection=own_connection, inline=inline),
        agents=agents(),
        model_for=batching(model_for, max_attempts=settings.JUNE_MAX_ATTEMPTS),
        sink=FanoutSink(sink(), DeliverySink(), *extra_sinks),
        dispatcher=dispatcher,
        observer=telemetry.observer(model_of=agent_model),
        lease_seconds=settings.JUNE_LEASE_SECONDS,
        max_attempts=settings.JUNE_MAX_ATTEMPTS,
        max_depth=settings.JUNE_SUBAGENT_MAX_DEPTH,
        max_fanout=settings.JUNE_SUBAGENT_MAX_FANOUT,
        call_sync=_on_database_thread,
    )


async def _on_database_thread(fn: Callable[[], Any]) -> Any:
    """Agents' synchronous hooks may use the ORM: run them where Django's connection lives."""
    return await sync_to_async(fn)()


@functools.lru_cache(maxsize=256)
def agent_model(agent_name: str) -> str:
    """The model id an agent's turns use (``demo`` for the offline model)."""
    try:
        agent = agents()[agent_name]
    except Exception:
        return "unknown"
    name = provider_name(agent)
    if name == "anthropic":
        return str((agent.model_config or {}).get("model") or "claude-sonnet-4-6")
    return name
