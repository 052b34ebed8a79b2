"""A Claude model reached through a list of providers, the next taking a call the one before could
not answer, with a circuit breaker per provider shared by every turn of the process.

``model = ["anthropic:claude-sonnet-4-6", "vertex:claude-sonnet-4-6", "bedrock:…"]`` in agent.py.
A call moves to the next provider when its failure is the provider's, not the request's: overloaded
(529), 5xx or 429 after the provider's own retries, a connection failure, a timeout — what
``anthropic.classify_error`` calls retryable. A failure every provider would repeat (400 invalid
request, 401/403, a prompt too long) is raised at once: another provider would only repeat it.

Once a delta is out, a failure is raised as it is (retryable): the engine redelivers the turn and
its next attempt starts again from the first provider the breakers allow. Nothing is yielded twice.

The breaker: ``failures`` failed calls in a row open a provider's breaker for ``cooldown`` seconds;
while open the provider is skipped (no request, no wait); after it one call tries it again (half
open), and a success closes it. When every breaker is open the calls still go out, first provider
first: a site with every provider failing should fail by the providers' own answers.

Thinking blocks and caching across providers (docs/providers.md): a call that continues a tool
loop tries first the provider that made the calls (its breaker allowing), whose signed thinking
block it must send back; moved, the blocks go as they are, never dropped or rewritten. Prompt
caches are per provider: the first call after a switch writes the prefix again (1.25x, once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from agents_app.providers.anthropic import DEFAULT_MODEL, AnthropicModel, from_settings
from agents_app.runtime.errors import AgentConfigError
from agents_app.runtime.messages import Role
from agents_app.runtime.model import ModelChunk, ModelError, ModelRequest

#: a provider in a list retries a failed call this many times before the next one takes it
#: (alone, a provider retries ``anthropic.DEFAULT_MAX_RETRIES`` times)
FALLBACK_RETRIES = 1
BREAKER_FAILURES = 2
BREAKER_COOLDOWN = 30.0
_LIST_KEYS = frozenset({"providers", "breaker"})


@dataclass
class Breaker:
    """One provider's health as this process saw it (``clock``: monotonic seconds)."""

    failures: int = BREAKER_FAILURES
    cooldown: float = BREAKER_COOLDOWN
    clock: Callable[[], float] = time.monotonic
    failed_in_a_row: int = 0
    open_until: float = 0.0

    @property
    def closed(self) -> bool:
        """May a call go to this provider now (closed, or half open after the cooldown)?"""
        return self.failed_in_a_row < self.failures or self.clock() >= self.open_until

    def failed(self) -> None:
        self.failed_in_a_row += 1
        if self.failed_in_a_row >= self.failures:
            self.open_until = self.clock() + self.cooldown

    def succeeded(self) -> None:
        self.failed_in_a_row = 0
        self.open_until = 0.0


#: the process's breakers, by provider (platform and place): every turn of a worker shares them
BREAKERS: dict[str, Breaker] = {}


def breaker_for(key: str, *, failures: int = BREAKER_FAILURES, cooldown: float = BREAKER_COOLDOWN) -> Breaker:
    found = BREAKERS.get(key)
    if found is None:
        found = BREAKERS[key] = Breaker(failures=failures, cooldown=cooldown)
    return found


@dataclass
class Candidate:
    model: AnthropicModel
    breaker: Breaker = field(default_factory=Breaker)

    @property
    def platform(self) -> str:
        return self.model.platform


class FallbackModel:
    """Claude through several providers, in order (``candidates``); see the module's doc."""

    def __init__(self, candidates: list[Candidate]) -> None:
        if len(candidates) < 2:
            raise ValueError("a fallback list needs two providers or more")
        self.candidates = candidates
        first = candidates[0].model
        #: read by the engine's compactor: the first provider's (the list shares one model family)
        self.context_window = first.context_window
        self.model = first.model

    def order(self, request: ModelRequest) -> list[Candidate]:
        """The providers to try for ``request``: those whose breaker allows a call, in the list's
        order, the one that made a tool loop's call first; then, as a last resort, the others."""
        allowed = [c for c in self.candidates if c.breaker.closed]
        sticky = _tool_loop_platform(request)
        if sticky is not None:
            allowed.sort(key=lambda c: c.platform != sticky)  # stable: the rest keep their order
        return allowed + [c for c in self.candidates if c not in allowed]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        failures: list[str] = []
        for candidate in self.order(request):
            yielded = False
            try:
                async for chunk in candidate.model.stream(request):
                    yielded = True
                    yield chunk
            except ModelError as exc:
                if exc.retryable:
                    candidate.breaker.failed()
                if yielded or not exc.retryable:
                    raise
                failures.append(f"{candidate.model.served_by}: {exc}")
                continue
            candidate.breaker.succeeded()
            return
        raise ModelError("every provider failed: " + "; ".join(failures), retryable=True)

    async def count_tokens(self, system: str, text: str) -> int:
        """Counted by the first provider (the breakers allowing) that can count; raises the last
        provider's error when none could."""
        error: Exception | None = None
        for candidate in self.order(ModelRequest(system=system, messages=(), tools=())):
            try:
                return await candidate.model.count_tokens(system, text)
            except Exception as exc:  # Bedrock cannot count; a provider may be down: the next
                error = exc
        raise error or ModelError("no provider could count tokens")

    async def aclose(self) -> None:
        for candidate in self.candidates:
            await candidate.model.aclose()


def _tool_loop_platform(request: ModelRequest) -> str | None:
    """The platform of the assistant message whose tool calls ``request`` answers, if any."""
    messages = request.messages
    if not messages or messages[-1].role != Role.TOOL:
        return None
    for message in reversed(messages):
        if message.role == Role.ASSISTANT:
            return (message.served_by or "").partition(":")[0] or None
    return None


def claude_model(agent: str, specs: list[tuple[str, str | None]], config: dict[str, Any]) -> Any:
    """The agent's model: one provider's ``AnthropicModel``, or a ``FallbackModel`` over several.

    ``config`` is the agent's ``model_config``: the settings every provider shares (``model``,
    ``max_tokens``, ``thinking_budget`` …), and for a list ``providers`` (per platform: ``region``,
    ``project_id``, ``max_retries``) and ``breaker`` (``failures``, ``cooldown``)."""
    if len(specs) == 1:
        platform, model = specs[0]
        own = dict(config)
        if model:
            own["model"] = model
        return from_settings(own, platform=platform)
    shared = {k: v for k, v in config.items() if k not in _LIST_KEYS}
    per_platform = config.get("providers") or {}
    if not isinstance(per_platform, dict) or set(per_platform) - {p for p, _ in specs}:
        raise AgentConfigError(f"agent {agent!r}: model_config providers must be a dict keyed by the list's platforms")
    breaker = config.get("breaker") or {}
    if not isinstance(breaker, dict) or set(breaker) - {"failures", "cooldown"}:
        raise AgentConfigError(f"agent {agent!r}: model_config breaker takes failures and cooldown, not {breaker!r}")
    candidates = []
    for platform, model in specs:
        own = {"max_retries": FALLBACK_RETRIES, **shared, **(per_platform.get(platform) or {})}
        own["model"] = model or own.get("model") or DEFAULT_MODEL
        built = from_settings(own, platform=platform)
        place = ",".join(
            f"{k}={v}" for k, v in sorted((per_platform.get(platform) or {}).items()) if k != "max_retries"
        )
        key = f"{platform}:{place}" if place else platform
        candidates.append(Candidate(built, breaker_for(key, **breaker)))
    return FallbackModel(candidates)
