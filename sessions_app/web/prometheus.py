"""``GET <June's prefix>api/metrics``: the site's state for a Prometheus scrape, staff only
(a staff user's bearer token, or a staff session), in the text exposition format 0.0.4.

These are read from the database at each scrape, so they are the site's figures whichever
process answers (the OpenTelemetry metrics, by contrast, are counted per worker process and
exported over OTLP: docs/operations.md). All are gauges:

- ``june_turns{agent, status}``: unfinished turns of live generations (queued, running,
  suspended);
- ``june_turns_parked{agent}``: turns waiting for a person's answer (not for their children);
- ``june_turns_failed_last_hour``, ``june_turns_retried_last_hour``;
- ``june_workers_alive``: worker processes whose heartbeat is fresh;
- ``june_queue_depth``: django-q2 tasks not yet acknowledged (turns waiting for a worker);
- ``june_tokens_today{agent, type}`` and ``june_cost_usd_today{agent}`` (``JUNE_MODEL_PRICES``);
- ``june_webhook_deliveries_failing``: deliveries not delivered after a try (retrying, or
  given up).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any, Iterable

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from sessions_app import health, selectors
from sessions_app.outbox import queue
from sessions_app.pricing import TOKEN_KEYS
from sessions_app.site_errors import AccessDenied
from sessions_app.web import api

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, help_text: str, samples: Iterable[tuple[dict[str, Any], float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        tags = ",".join(f'{k}="{_label(v)}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{tags}}} {float(value):g}" if tags else f"{name} {float(value):g}")
    return lines


def exposition(now: dt.datetime | None = None) -> str:
    state = selectors.site_state(now or timezone.now())
    by_status, parked, per_agent = state["by_status"], state["parked"], state["per_agent"]
    failed, retried, failing = state["failed_hour"], state["retried_hour"], state["deliveries_failing"]
    tokens: dict[tuple[str, str], int] = defaultdict(int)
    for agent, usage in per_agent.items():
        for key in TOKEN_KEYS:
            tokens[(agent, key.removesuffix("_tokens"))] += usage.tokens[key]
    lines = [
        *_family(
            "june_turns",
            "Unfinished turns of live generations, by status.",
            [({"agent": a, "status": s}, n) for a, s, n in by_status],
        ),
        *_family("june_turns_parked", "Turns waiting for a person's answer.", [({"agent": a}, n) for a, n in parked]),
        *_family("june_turns_failed_last_hour", "Turns that failed in the last hour.", [({}, failed)]),
        *_family(
            "june_turns_retried_last_hour",
            "Turns started in the last hour that needed another attempt.",
            [({}, retried)],
        ),
        *_family("june_workers_alive", "Worker processes whose heartbeat is fresh.", [({}, health.workers_alive())]),
        *_family(
            "june_queue_depth", "Queued tasks not yet taken by a worker's runner.", [({}, queue.queue_depth()[0])]
        ),
        *_family(
            "june_tokens_today",
            "Tokens today, by agent and type.",
            [({"agent": a, "type": t}, n) for (a, t), n in sorted(tokens.items())],
        ),
        *_family(
            "june_cost_usd_today",
            "What today's model calls cost, in US dollars (JUNE_MODEL_PRICES).",
            [({"agent": a}, u.cost) for a, u in sorted(per_agent.items())],
        ),
        *_family(
            "june_webhook_deliveries_failing",
            "Webhook deliveries not delivered after a try (retrying or failed).",
            [({}, failing)],
        ),
    ]
    return "\n".join(lines) + "\n"


@api.api_view("GET")
def metrics(request: HttpRequest, user: Any) -> HttpResponse:
    if not (user.is_active and user.is_staff):
        raise AccessDenied("the metrics are for staff")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
