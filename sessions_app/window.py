"""Does a message fit the agent's model? Refused before a turn is created when it cannot.

Counted by the API where a Claude model is configured (``messages.count_tokens``): characters / 4
undercounts text that is not English (a Chinese or Japanese character is often a token or more),
so a message the estimate let through could overflow every step. The API is asked only when the
message could possibly not fit — a token is at least one byte, so instructions and message whose
UTF-8 bytes are within the window fit whatever the count — and each count is cached by what was
counted (a resend, an edit back and forth, a retry after a 429 count nothing again). Offline (the
demo model), on a platform that cannot count (Bedrock), or when counting fails or takes over
``COUNT_TIMEOUT`` seconds, the estimate decides: counting never blocks a turn.

Before this check, a 20,000-character message was accepted without a word on the model's window, then
failed after two compactions (compaction keeps the current message verbatim, so no summary can
make room for it). A message fits when the agent's instructions and the message, estimated as
the engine estimates them (characters / 4, ``compaction.estimate_tokens``), are within the
model's context window (``agents_app.providers.context_window``: the compaction setting, else
the provider's; the demo model's is 1,600 tokens). A model whose window is unknown is not
checked. The chat shows the limit under the composer before sending; the API answers 413
``context_window_exceeded`` naming it."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass

from django.core.cache import cache

from agents_app.providers import CLAUDE_PLATFORMS, context_window, model_for, provider_name
from agents_app.runtime.agent import Agent
from agents_app.runtime.compaction import estimate_tokens
from sessions_app import wiring
from sessions_app.site_errors import PayloadTooLarge

log = logging.getLogger(__name__)

#: seconds a count may take before the estimate decides instead
COUNT_TIMEOUT = 5.0
#: a request's tokens beyond its text's bytes: the message's framing (generous)
FRAMING_TOKENS = 32


class ContextWindowExceeded(PayloadTooLarge):
    code = "context_window_exceeded"


@dataclass(frozen=True, slots=True)
class Room:
    """``window``: the model's context window (tokens); ``chars``: the longest message that fits
    in it beside the agent's instructions."""

    window: int
    chars: int

    def message(self, agent: str, length: int) -> str:
        return (
            f"the message has {length:,} characters (about {estimate_tokens(length):,} tokens) and cannot fit "
            f"the {agent} agent's model context window of {self.window:,} tokens: at most {self.chars:,} "
            "characters fit; shorten it or split it over several messages"
        )


def room(agent: str) -> Room | None:
    """The room a message has with ``agent``'s model; None when its window is unknown."""
    definition = wiring.agent(agent)
    window = context_window(definition)
    if not window:
        return None
    # the engine's test: (instructions + message) // 4 > window overflows
    return Room(window=window, chars=max(window * 4 + 3 - len(definition.instructions), 0))


def check_fits(agent: str, text: str) -> None:
    """Raise ``ContextWindowExceeded`` (413) for a message the model could never read whole."""
    found = room(agent)
    if found is None:
        return
    definition = wiring.agent(agent)
    counted = count_tokens(definition, text, found.window)
    if counted is None:
        if len(text) > found.chars:
            raise ContextWindowExceeded(found.message(agent, len(text)))
    elif counted > found.window:
        raise ContextWindowExceeded(
            f"the message has {len(text):,} characters ({counted:,} tokens with the {agent} agent's "
            f"instructions, as the model counts them) and cannot fit its model context window of "
            f"{found.window:,} tokens; shorten it or split it over several messages"
        )


def count_tokens(definition: Agent, text: str, window: int) -> int | None:
    """The tokens of the agent's instructions and ``text`` as its Claude model counts them; None
    when the message surely fits (its bytes are within the window), when the model is not
    Claude's, or when the count could not be had (the estimate decides then)."""
    system = definition.instructions
    if len(system.encode()) + len(text.encode()) + FRAMING_TOKENS <= window:
        return None
    if provider_name(definition) not in CLAUDE_PLATFORMS:
        return None
    key = "june:tokens:" + hashlib.sha256(repr((definition.name, definition.model, system, text)).encode()).hexdigest()
    cached = cache.get(key)
    if isinstance(cached, int):
        return cached
    try:
        model = model_for(definition)
        counted = asyncio.run(asyncio.wait_for(model.count_tokens(system, text), COUNT_TIMEOUT))  # type: ignore[attr-defined]
    except Exception as exc:  # offline, a platform that cannot count, a timeout: never block a turn
        log.info(
            "token count for %s unavailable (%s: %s); the estimate decides", definition.name, type(exc).__name__, exc
        )
        return None
    cache.set(key, int(counted), 24 * 3600)
    return int(counted)
