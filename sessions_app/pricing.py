"""What model calls cost: ``JUNE_MODEL_PRICES`` (settings) maps a model id (or its prefix) to US
dollars per million tokens; defaults for the Anthropic models, zero for the demo. A turn's model
is its agent's (``wiring.agent_model``). The console's cost columns, the Prometheus gauges and
the ``june.cost`` metric all price with this. It imports none of June's modules (the telemetry,
which ``wiring`` builds, uses it), so it loads before Django's apps do."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from django.conf import settings
from django.utils import timezone

#: US dollars per million tokens (list prices when written; override with JUNE_MODEL_PRICES)
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "demo": {"input": 0.0, "output": 0.0},
    "scripted": {"input": 0.0, "output": 0.0},
    "claude-opus-4-6": {"input": 5.0, "output": 25.0},
    "claude-opus-4-5": {"input": 5.0, "output": 25.0},
    "claude-opus-4-1": {"input": 15.0, "output": 75.0},
    "claude-opus-4": {"input": 15.0, "output": 75.0},
    "claude-sonnet-4": {"input": 3.0, "output": 15.0},
    "claude-3-7-sonnet": {"input": 3.0, "output": 15.0},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0},
    "claude-3-5-haiku": {"input": 0.8, "output": 4.0},
}
#: cache writes cost 1.25x the input price (2x for a 1-hour TTL), cache reads 0.1x (Anthropic's
#: rule), unless a price says otherwise (``cache_write``, ``cache_write_1h``, ``cache_read``)
CACHE_WRITE, CACHE_WRITE_1H, CACHE_READ = 1.25, 2.0, 0.1
#: the part of ``cache_creation_input_tokens`` written with the 1-hour TTL (the provider's usage)
CACHE_WRITE_1H_KEY = "cache_creation_1h_input_tokens"
TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
#: a call answered through the Message Batches API (``agents_app.providers.anthropic_batches``): its
#: ``served_by`` platform, and the prefix of the usage keys that count its tokens a second time,
#: the part of the usage priced at ``JUNE_BATCH_PRICE_FACTOR`` times the price
BATCH_PLATFORM, BATCH_PREFIX = "anthropic-batch", "batch_"


def prices() -> dict[str, dict[str, float]]:
    configured = getattr(settings, "JUNE_MODEL_PRICES", None)
    return {**DEFAULT_PRICES, **(configured or {})}


#: how Bedrock names Claude: ``anthropic.claude-…`` behind an optional inference-profile region
_BEDROCK_ID = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.")


def price_for(model: str) -> dict[str, float] | None:
    """The price of ``model``: an exact entry, else the longest entry it starts with.

    ``model`` may name its provider as steps record it (``vertex:claude-sonnet-4-6@20250929``,
    ``bedrock:us.anthropic.claude-sonnet-4-6-v1:0``): an entry for the provider's own name wins
    (``JUNE_MODEL_PRICES = {"bedrock:us.anthropic.claude-sonnet-4": {…}}``), else the Claude model's
    price under its plain name (Bedrock's prefix and Vertex's ``@version`` left out of the match)."""
    table = prices()
    found = _lookup(table, model)
    if found is not None or ":" not in model:
        return found
    platform, _, bare = model.partition(":")
    if platform in ("anthropic", "bedrock", "vertex", BATCH_PLATFORM):
        return _lookup(table, _BEDROCK_ID.sub("", bare))
    return None


def _lookup(table: dict[str, dict[str, float]], model: str) -> dict[str, float] | None:
    if model in table:
        return table[model]
    matches = [k for k in table if model.startswith(k)]
    return table[max(matches, key=len)] if matches else None


def cost_of(usage: dict[str, Any] | None, model: str) -> float | None:
    """US dollars for ``usage`` on ``model`` (None when the model has no price). The tokens of
    batched calls (``batch_…`` keys, also counted in the plain keys) cost
    ``JUNE_BATCH_PRICE_FACTOR`` times the price."""
    price = price_for(model)
    if price is None:
        return None
    full = _cost(usage, price)
    batched = {k[len(BATCH_PREFIX) :]: v for k, v in (usage or {}).items() if k.startswith(BATCH_PREFIX)}
    if not batched:
        return full
    return full - (1.0 - float(settings.JUNE_BATCH_PRICE_FACTOR)) * _cost(batched, price)


def _cost(usage: dict[str, Any] | None, price: dict[str, float]) -> float:
    u = {k: int((usage or {}).get(k) or 0) for k in TOKEN_KEYS}
    inp = float(price.get("input", 0.0))
    # cache_creation_input_tokens counts every write; the 1-hour part of it is priced apart
    hour = min(int((usage or {}).get(CACHE_WRITE_1H_KEY) or 0), u["cache_creation_input_tokens"])
    return (
        u["input_tokens"] * inp
        + u["output_tokens"] * float(price.get("output", 0.0))
        + (u["cache_creation_input_tokens"] - hour) * float(price.get("cache_write", inp * CACHE_WRITE))
        + hour * float(price.get("cache_write_1h", inp * CACHE_WRITE_1H))
        + u["cache_read_input_tokens"] * float(price.get("cache_read", inp * CACHE_READ))
    ) / 1_000_000


@dataclass
class Usage:
    turns: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    cost: float = 0.0
    unpriced: int = 0  # turns whose model has no price
    model: str = ""

    def add(self, usage: dict[str, Any] | None, model: str) -> None:
        self.turns += 1
        for k in TOKEN_KEYS:
            self.tokens[k] += int((usage or {}).get(k) or 0)
        cost = cost_of(usage, model)
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())


def usage_totals(turns, model_of: Callable[[str], str]) -> tuple[Usage, dict[str, Usage], dict[dt.date, Usage]]:
    """Totals over a queryset of turns: overall, per agent, per (local) day; ``model_of`` names
    an agent's model (``wiring.agent_model``)."""
    total, per_agent, per_day = Usage(), defaultdict(Usage), defaultdict(Usage)
    for agent, created, usage in turns.values_list("session__agent", "created_at", "usage").iterator(chunk_size=2000):
        model = model_of(agent)
        total.add(usage, model)
        per_agent[agent].add(usage, model)
        per_agent[agent].model = model
        per_day[timezone.localdate(created)].add(usage, model)
    return total, dict(sorted(per_agent.items())), dict(sorted(per_day.items(), reverse=True))
