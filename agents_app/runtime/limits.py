"""What one turn may spend: a bound on its model calls and tokens, ended with an answer.

A model that keeps calling tools (a real failure mode) would run until someone cancels it. So
every turn is bounded by default (``Limits``; an agent declares its own in ``agent.py``:
``limits = {"model_calls": 50, "tokens": 200_000}``, a site its defaults through the host,
``set_defaults``). A turn that reaches a limit is not killed: its next model call is its last —
sent with no tools and a note that the limit was reached — and the turn completes with that
reply as its answer, marked ``limited`` (the limit's name). What a turn has spent is read off its
transcript (its assistant messages and their usage) and its children's results, so a replay
after a crash counts the same.

A tree of turns shares its root's budget: a spawn gives each new child a share of what its
parent has left (``shares``: the parent keeps one model call for its answer, the rest is split
evenly), carried in the child's input (``target["budget"]``) and applied over the child agent's
own limits (``Limits.within``); the child's spending comes back with its result and counts for
the parent. So the calls and tokens of a whole tree stay within its root turn's limits.
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

    def within(self, budget: dict[str, Any] | None) -> Limits:
        """These limits, lowered to a share of a parent's budget (a child turn's)."""
        if not budget:
            return self
        lowered = {}
        for key in NAMES:
            share = budget.get(key)
            if isinstance(share, int) and not isinstance(share, bool):
                own = getattr(self, key)
                lowered[key] = max(0, share) if own is None else min(own, max(0, share))
        return replace(self, **lowered)

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


def spent(messages: Iterable[Message], turn_id: str, children: dict[str, Any] | None = None) -> tuple[int, int]:
    """(model calls, tokens) of the turn's assistant messages among ``messages``, and of its
    children's whole trees (``children``: their summed usage, ``subagents.children_usage``)."""
    calls = tokens = 0
    assistant = Role.ASSISTANT
    for m in messages:
        if m.role == assistant and m.turn_id == turn_id:
            calls += 1
            usage = m.usage or {}
            tokens += _int(usage.get("input_tokens")) + _int(usage.get("output_tokens"))
    if children:
        calls += _int(children.get("model_calls"))
        tokens += _int(children.get("input_tokens")) + _int(children.get("output_tokens"))
    return calls, tokens


def shares(limits: Limits, calls: int, tokens: int, children: int, n: int) -> dict[str, int]:
    """Each of ``n`` new children's share of what a parent with these ``limits`` has left after
    spending ``calls`` model calls and ``tokens`` tokens and spawning ``children`` before them:
    the parent keeps one model call for its own answer. Raises ValueError (the spawn's refusal)
    when the model calls left cannot give each child one."""
    budget: dict[str, int] = {}
    if limits.model_calls is not None:
        left = limits.model_calls - calls - 1
        if left < n:
            raise ValueError(
                f"this turn has {max(left, 0)} of its {limits.model_calls} model calls left for "
                f"children, too few for {n} more"
            )
        budget["model_calls"] = left // n
    if limits.tokens is not None:
        budget["tokens"] = max(limits.tokens - tokens, 0) // n
    if limits.children is not None:
        budget["children"] = max(limits.children - children - n, 0) // n
    return budget


def tree_usage(usage: dict[str, Any] | None) -> dict[str, int]:
    """A settled turn's usage summed with its children's (``usage["children"]``), counts only."""
    total: dict[str, int] = {}
    for key, value in (usage or {}).items():
        if key == "children" and isinstance(value, dict):
            for k, v in tree_usage(value).items():
                total[k] = total.get(k, 0) + v
        elif isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
    return total


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
