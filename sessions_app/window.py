"""Does a message fit the agent's model? Refused before a turn is created when it cannot.

Before this check, a 20,000-character message was accepted without a word on the model's window, then
failed after two compactions (compaction keeps the current message verbatim, so no summary can
make room for it). A message fits when the agent's instructions and the message, estimated as
the engine estimates them (characters / 4, ``compaction.estimate_tokens``), are within the
model's context window (``agents_app.providers.context_window``: the compaction setting, else
the provider's; the demo model's is 1,600 tokens). A model whose window is unknown is not
checked. The chat shows the limit under the composer before sending; the API answers 413
``context_window_exceeded`` naming it."""

from __future__ import annotations

from dataclasses import dataclass

from agents_app.providers import context_window
from agents_app.runtime.compaction import estimate_tokens
from sessions_app import wiring
from sessions_app.errors import PayloadTooLarge


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
    if found is not None and len(text) > found.chars:
        raise ContextWindowExceeded(found.message(agent, len(text)))
