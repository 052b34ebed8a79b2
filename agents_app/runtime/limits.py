"""What one turn may spend: a bound on its model calls and tokens, ended with an answer.

A model that keeps calling tools (a real failure mode) would run until someone cancels it. So
every turn is bounded by default (``Limits``; an agent declares its own in ``agent.py``:
``limits = {"model_calls": 50, "tokens": 200_000}``, a site its defaults through the host,
``set_defaults``). A turn that reaches a limit is not killed: its next model call is its last —
sent with no tools and a note that the limit was reached — and the turn completes with that
reply as its answer, marked ``limited`` (the limit's name). What a turn has spent is read off its
transcript (its assistant messages and their usage), so a replay after a crash counts the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from .errors import AgentConfigError
from .messages import Message, Role

#: the note the last model call gets (appended to the system prompt)
LIMIT_NOTE = (
    "You have reached this turn's limit of {what}. You cannot call tools any more. Reply now with "
    "your best final answer from what you have, and say briefly what is left undone."
)
NAMES = {"model_calls": "model calls", "tokens": "tokens", "children": "children"}


@dataclass(frozen=True, slots=True)
class Limits:
    """``model_calls``: model calls a turn may make, its last (no tools) included; ``tokens``:
    input and output tokens of its model calls together; ``children``: subagent turns it may
    spawn in all (one tool call's are bounded apart: the fan-out). None: no bound of that kind."""

    model_calls: int | None = 50
    tokens: int | None = None
    children: int | None = 24

    def reached(self, calls: int, tokens: int) -> str | None:
        """The limit the next model call must be the last for, if any: its name."""
        if self.model_calls is not None and calls + 1 >= self.model_calls:
            return "model_calls"
        if self.tokens is not None and tokens >= self.tokens:
            return "tokens"
        return None

    def note(self, which: str) -> str:
        bound = self.model_calls if which == "model_calls" else self.tokens
        return LIMIT_NOTE.format(what=f"{bound} {NAMES[which]}")


_defaults = Limits()


def set_defaults(value: dict[str, Any] | Limits | None) -> None:
    """The site's defaults, for agents that declare none of their own (the host calls it)."""
    global _defaults
    _defaults = Limits() if value is None else limits_config(value, base=Limits())


def defaults() -> Limits:
    return _defaults


def limits_config(value: Any, *, base: Limits | None = None) -> Limits:
    """``limits`` as declared in ``agent.py`` (a dict, a ``Limits``, or None for the defaults);
    unknown keys and bad values raise (a typo must not leave a turn unbounded)."""
    start = _defaults if base is None else base
    if value is None:
        return start
    if isinstance(value, Limits):
        return value
    if not isinstance(value, dict):
        raise AgentConfigError(f"limits must be a dict, not {type(value).__name__}")
    unknown = set(value) - set(NAMES)
    if unknown:
        raise AgentConfigError(f"unknown limits: {', '.join(sorted(unknown))} (known: {', '.join(NAMES)})")
    for key, bound in value.items():
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
            raise AgentConfigError(f"limits[{key!r}] must be a positive integer or None, not {bound!r}")
    return replace(start, **value)


def spent(messages: Iterable[Message], turn_id: str) -> tuple[int, int]:
    """(model calls, tokens) of the turn's assistant messages among ``messages``."""
    calls = tokens = 0
    assistant = Role.ASSISTANT
    for m in messages:
        if m.role == assistant and m.turn_id == turn_id:
            calls += 1
            usage = m.usage or {}
            tokens += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    return calls, tokens
