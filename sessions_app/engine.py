"""The site's engine: the runtime wired to the Django store, the event sink and django-q2.

One Runtime per process (``runtime()``); agents are discovered once from their folders.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from django.conf import settings

from agents_app.loader import discover
from agents_app.providers import model_for
from agents_app.runtime import Agent, Runtime
from agents_app.runtime.executor import TurnExecutor
from agents_app.runtime.session import FanoutSink

from .store import DjangoSessionStore


@functools.cache
def agents() -> dict[str, Agent]:
    from .inbound import MOUNTED_SOURCES

    found = discover(settings.JUNE_AGENT_DIRS)
    for definition in found.values():
        definition.warn_unused_surfaces(MOUNTED_SOURCES)
    return found


def agent(name: str) -> Agent:
    from agents_app.runtime.errors import NotFound

    try:
        return agents()[name]
    except KeyError:
        raise NotFound(f"no agent named {name!r}") from None


def store() -> DjangoSessionStore:
    return DjangoSessionStore()


def sink(*, background: bool = False) -> Any:
    """The site's EventSink: the Channels layer (imported lazily: workers need no consumer).
    ``background``: layer sends leave the turn's critical path (a worker's loop; close() it)."""
    from .sink import ChannelsEventSink

    return ChannelsEventSink(background=background)


def delivery_sink() -> Any:
    """Sends a webhook turn's result when it settles (sessions_app.inbound)."""
    from .inbound import DeliverySink

    return DeliverySink()


def executor(*, extra_sinks: tuple[Any, ...] = ()) -> TurnExecutor:
    return TurnExecutor(
        store=store(),
        sink=FanoutSink(sink(background=True), delivery_sink(), *extra_sinks),
        agent_for=agent,
        model_for=model_for,
        clock=time.time,
        lease_seconds=settings.JUNE_LEASE_SECONDS,
        max_attempts=settings.JUNE_MAX_ATTEMPTS,
    )


def runtime(*, dispatcher: Any = None, extra_sinks: tuple[Any, ...] = ()) -> Runtime:
    """A Runtime over the Django store; turns go to django-q2 unless a dispatcher is given."""
    from .tasks import Q2Dispatcher

    return Runtime(
        store=store(),
        agents=agents(),
        model_for=model_for,
        sink=FanoutSink(sink(), delivery_sink(), *extra_sinks),
        dispatcher=dispatcher or Q2Dispatcher(),
        lease_seconds=settings.JUNE_LEASE_SECONDS,
        max_attempts=settings.JUNE_MAX_ATTEMPTS,
    )
