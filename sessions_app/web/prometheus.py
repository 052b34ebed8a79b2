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
- ``june_tokens_today{agent, type}`` and ``june_cost_usd_today{agent}`` (``JUNE_MODEL_PRICES``);
- ``june_webhook_deliveries_failing``: deliveries not delivered after a try (retrying, or
  given up).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any, Iterable

from django.db.models import Count, F
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from agents_app.models import DeliveryStatus, WebhookDelivery
from sessions_app import health, wiring
from sessions_app import models as m
from sessions_app.errors import AccessDenied
from sessions_app.pricing import TOKEN_KEYS, usage_totals
from sessions_app.web import api

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNFINISHED = (m.TurnStatus.QUEUED, m.TurnStatus.RUNNING, m.TurnStatus.SUSPENDED)


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, help_text: str, samples: Iterable[tuple[dict[str, Any], float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    for labels, value in samples:
        tags = ",".join(f'{k}="{_label(v)}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{tags}}} {float(value):g}" if tags else f"{name} {float(value):g}")
    return lines


def exposition(now: dt.datetime | None = None) -> str:
    now = now or timezone.now()
    hour_ago = now - dt.timedelta(hours=1)
    live = m.Turn.objects.filter(generation=F("session__generation"))
    by_status = (live.filter(status__in=UNFINISHED).values_list("session__agent", "status")
                 .annotate(n=Count("pk")).order_by())
    parked = (live.filter(status=m.TurnStatus.SUSPENDED, waiting=0).values_list("session__agent")
              .annotate(n=Count("pk")).order_by())
    failed = m.Event.objects.filter(type="turn.failed", created_at__gte=hour_ago).values("turn_id").distinct().count()
    retried = m.Turn.objects.filter(attempts__gt=1, created_at__gte=hour_ago).count()
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    _, per_agent, _ = usage_totals(m.Turn.objects.filter(created_at__gte=today), wiring.agent_model)
    failing = WebhookDelivery.objects.exclude(status=DeliveryStatus.DELIVERED).filter(attempts__gt=0).count()
    tokens: dict[tuple[str, str], int] = defaultdict(int)
    for agent, usage in per_agent.items():
        for key in TOKEN_KEYS:
            tokens[(agent, key.removesuffix("_tokens"))] += usage.tokens[key]
    lines = [
        *_family("june_turns", "Unfinished turns of live generations, by status.",
                 [({"agent": a, "status": s}, n) for a, s, n in by_status]),
        *_family("june_turns_parked", "Turns waiting for a person's answer.", [({"agent": a}, n) for a, n in parked]),
        *_family("june_turns_failed_last_hour", "Turns that failed in the last hour.", [({}, failed)]),
        *_family("june_turns_retried_last_hour", "Turns started in the last hour that needed another attempt.",
                 [({}, retried)]),
        *_family("june_workers_alive", "Worker processes whose heartbeat is fresh.", [({}, health.workers_alive())]),
        *_family("june_tokens_today", "Tokens today, by agent and type.",
                 [({"agent": a, "type": t}, n) for (a, t), n in sorted(tokens.items())]),
        *_family("june_cost_usd_today", "What today's model calls cost, in US dollars (JUNE_MODEL_PRICES).",
                 [({"agent": a}, u.cost) for a, u in sorted(per_agent.items())]),
        *_family("june_webhook_deliveries_failing", "Webhook deliveries not delivered after a try (retrying or failed).",
                 [({}, failing)]),
    ]
    return "\n".join(lines) + "\n"


@api.api_view("GET")
def metrics(request: HttpRequest, user: Any) -> HttpResponse:
    if not (user.is_active and user.is_staff):
        raise AccessDenied("the metrics are for staff")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
