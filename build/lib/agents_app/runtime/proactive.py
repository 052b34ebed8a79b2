"""Agent-initiated (proactive) turns, and the channels they are delivered through.

(A "channel" here is the runtime's surface concept; Django Channels' transport is always called
"the channel layer" in this project.) A **channel** is how turns reach an agent and how results leave it: it names the ``source``
its turns carry (web, http, webhook, schedule, …: set by the channel, never by a user) and
renders a settled turn to a target with ``deliver(target, result)``.

``receive()`` starts a **proactive** turn — no inbound message, a seed instead — and renders its
result through the channel's ``deliver()``. The seed is stored as a ``trigger`` message
attributed to ``trigger["by"]`` (e.g. ``"cron:daily"``), so the transcript shows that no human
sent it. ``receive`` raises, never drops the turn silently: before the turn starts when the
channel has no ``deliver()`` (or rejects the target), after it settles when delivery fails.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

from .errors import JuneError
from .seams import TurnInput
from .session import AgentSession, TurnResult


@runtime_checkable
class Channel(Protocol):
    """An inbound/outbound surface of an agent."""

    #: the ``source`` of every turn this channel starts (a user cannot set it)
    source: str

    async def deliver(self, target: dict[str, Any], result: TurnResult) -> Any:
        """Render a settled turn (completed, suspended, failed or cancelled) to ``target``;
        raise when it cannot."""


class ChannelError(JuneError):
    """The channel cannot start or deliver this turn (no ``deliver()``, bad target, …)."""

    http_status = 502
    code = "channel_error"


class DeliveryError(ChannelError):
    """The turn settled but its result could not be delivered; ``result`` holds it."""

    code = "delivery_failed"

    def __init__(self, message: str, *, result: TurnResult | None = None) -> None:
        super().__init__(message)
        self.result = result


def check_channel(channel: Any) -> str:
    """The channel's source; ChannelError when it is not a usable channel."""
    source = getattr(channel, "source", None)
    if not isinstance(source, str) or not source:
        raise ChannelError(f"{channel!r} has no source: a channel names the source its turns carry")
    deliver = getattr(channel, "deliver", None)
    if deliver is None or not callable(deliver):
        raise ChannelError(f"channel {source!r} has no deliver(): a proactive turn would be dropped")
    return source


def check_trigger(trigger: Any) -> str:
    """``by`` of a ``{"kind": "proactive", "by": …}`` trigger."""
    if not isinstance(trigger, dict) or trigger.get("kind") != "proactive":
        raise ChannelError('a proactive turn needs trigger={"kind": "proactive", "by": …}')
    by = trigger.get("by")
    if not isinstance(by, str) or not by.strip():
        raise ChannelError("trigger['by'] must name what started the turn (e.g. 'cron:daily')")
    return by


async def receive(
    channel: Channel,
    *,
    seed: str,
    target: dict[str, Any] | None,
    trigger: dict[str, Any],
    session: AgentSession,
    turn_id: str | None = None,
    timeout: float | None = None,
) -> TurnResult:
    """Start a proactive turn on ``session`` and deliver its result through ``channel``.

    ``turn_id`` makes the start idempotent for a caller that may run twice (a schedule tick
    redelivered by the queue). Returns the delivered result; raises ChannelError before the
    turn starts when the channel cannot deliver at all, DeliveryError after it settles when
    ``deliver()`` fails (the turn itself is committed either way: nothing is lost)."""
    source = check_channel(channel)
    by = check_trigger(trigger)
    if not isinstance(seed, str) or not seed.strip():
        raise ChannelError("a proactive turn needs a non-empty seed")
    check_target = getattr(channel, "check_target", None)
    if check_target is not None:
        out = check_target(target)
        if inspect.isawaitable(out):
            await out
    turn_id = await session.start(
        TurnInput(text=seed, kind="proactive", by=by, source=source, target=target), turn_id=turn_id
    )
    result = await session.result(turn_id, timeout=timeout)
    try:
        out = channel.deliver(target or {}, result)
        if inspect.isawaitable(out):
            await out
    except Exception as exc:
        raise DeliveryError(
            f"channel {source!r} could not deliver turn {turn_id}: {type(exc).__name__}: {exc}", result=result
        ) from exc
    return result
