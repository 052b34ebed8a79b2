"""The operator console: the dashboard, and tokens and cost per turn, session, agent and day
(a turn's timeline: ``admin.timeline``).

- ``/admin/june/dashboard/`` — running, queued and parked turns (parked by age), running turns
  whose lease expired, failures and retries in the last hour, schedules due next, failing
  webhook deliveries, tokens and cost today and per agent, users against their rate limit and
  token quota (``quotas.usage_per_user``); the page re-reads its body every
  few seconds (``static/june/dashboard.js``; ``?fragment=1`` is the body alone).
- Cost: ``JUNE_MODEL_PRICES`` (settings, or the environment as JSON) maps a model id (or its
  prefix) to US dollars per million tokens; defaults for the Anthropic models, zero for demo.
  A turn's model is its agent's (``agents_app.providers.provider_name`` and ``model_config``).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, Min
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django_q.models import Schedule

from agents_app.models import DeliveryStatus, WebhookDelivery
from sessions_app import audit, health, listings, quotas
from sessions_app import models as m
from sessions_app.pricing import TOKEN_KEYS, Usage, cost_of, price_for, prices  # noqa: F401 (re-exported)
from sessions_app.pricing import usage_totals as _usage_totals
from sessions_app.wiring import agent_model

from .timeline import lease_text, seconds_text

LIST_ROWS = 20
REFRESH_SECONDS = 5


def usage_totals(turns) -> tuple[Usage, dict[str, Usage], dict[dt.date, Usage]]:
    """Totals over a queryset of turns: overall, per agent, per (local) day."""
    return _usage_totals(turns, agent_model)


def usage_per_user(turns) -> dict[str, Usage]:
    """Totals per user (the owner of the turn's session: a subagent's session is its parent's
    owner's); each turn's own calls at its own agent's price. Sessions without an owner
    (webhooks, schedules) under "—"."""
    per_user: dict[str, Usage] = defaultdict(Usage)
    rows = turns.values_list("session__agent", f"session__owner__{m.username_field()}", "usage").iterator(
        chunk_size=2000
    )
    for agent, username, usage in rows:
        per_user[username or "—"].add(usage, agent_model(agent))
    return dict(sorted(per_user.items(), key=lambda kv: -kv[1].cost))


def session_usage(session: m.Session) -> dict[str, Any]:
    """Tokens and cost of the session: its live generation and all generations."""
    live = Usage()
    everything = Usage()
    model = agent_model(session.agent)
    for generation, usage in m.Turn.objects.filter(session=session).values_list("generation", "usage"):
        everything.add(usage, model)
        if generation == session.generation:
            live.add(usage, model)
    return {"model": model, "live": live, "all": everything}


# -- the dashboard -------------------------------------------------------------------------------------


def _ago(when: dt.datetime | None, now: dt.datetime) -> str:
    if when is None:
        return "—"
    return seconds_text((now - when).total_seconds())


def turn_url(turn_id: str) -> str:
    try:
        return reverse("admin:sessions_app_turn_change", args=[turn_id])
    except NoReverseMatch:
        return ""


def _turn_rows(qs, now: dt.datetime, *, when: str = "created_at") -> list[dict[str, Any]]:
    rows = []
    for t in qs.select_related("session")[:LIST_ROWS]:
        at = getattr(t, when, None)
        rows.append(
            {
                "id": t.pk,
                "url": turn_url(t.pk),
                "agent": t.session.agent,
                "session": t.session.key,
                "status": t.status,
                "phase": t.phase or "",
                "attempts": t.attempts,
                "owner": t.lease_owner or "",
                "age": _ago(at, now),
                "lease": lease_text(t, now.timestamp()),
                "text": str((t.input or {}).get("text") or "")[:80],
                "seen": (t.session_id, t.session.owner_id, t.pk),
            }
        )
    return rows


def dashboard_data(now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    epoch = now.timestamp()
    hour_ago = now - dt.timedelta(hours=1)
    running = m.Turn.objects.filter(status=m.TurnStatus.RUNNING)
    live = running.filter(lease_expires_at__gte=epoch).order_by("created_at")
    expired = running.filter(lease_expires_at__lt=epoch).order_by("lease_expires_at")
    queued = m.Turn.objects.filter(status=m.TurnStatus.QUEUED).order_by("created_at")
    parked = listings.parked_requests()
    failed_ids = m.Event.objects.filter(type="turn.failed", created_at__gte=hour_ago).values_list("turn_id", flat=True)
    failures = m.Turn.objects.filter(pk__in=list(failed_ids[:500])).order_by("-updated_at")
    retried = m.Turn.objects.filter(attempts__gt=1, created_at__gte=hour_ago).order_by("-created_at")
    counts = dict(
        m.Turn.objects.filter(status__in=[m.TurnStatus.RUNNING, m.TurnStatus.QUEUED, m.TurnStatus.SUSPENDED])
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    oldest_queued = queued.aggregate(at=Min("created_at"))["at"]
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    total_today, per_agent_today, _ = usage_totals(m.Turn.objects.filter(created_at__gte=today))
    per_user_today = usage_per_user(m.Turn.objects.filter(created_at__gte=today))
    _, _, per_day = usage_totals(m.Turn.objects.filter(created_at__gte=today - dt.timedelta(days=6)))
    schedules = []
    for s in Schedule.objects.exclude(repeats=0).order_by("next_run")[:10]:
        schedules.append(
            {
                "name": s.name or s.func,
                "func": s.func,
                "next_run": s.next_run,
                "in": seconds_text((s.next_run - now).total_seconds())
                if s.next_run and s.next_run > now
                else "due now",
            }
        )
    workers = [
        {**w, "seen": seconds_text(w["age"]), "up": _ago(w["started_at"], now)} for w in health.worker_rows(now=now)
    ]
    failing = (
        WebhookDelivery.objects.exclude(status=DeliveryStatus.DELIVERED)
        .filter(attempts__gt=0)
        .order_by("-updated_at")[:LIST_ROWS]
    )
    return {
        "now": now,
        "refresh": REFRESH_SECONDS,
        "counts": {
            "running": live.count(),
            "expired": expired.count(),
            "queued": counts.get("queued", 0),
            "parked": counts.get("suspended", 0),
            "failed_hour": failures.count(),
            "retried_hour": retried.count(),
        },
        "oldest_queued": _ago(oldest_queued, now) if oldest_queued else "",
        "running": _turn_rows(live, now),
        "expired": _turn_rows(expired, now),
        "queued": _turn_rows(queued, now),
        "parked": [
            {
                "id": t.pk,
                "url": turn_url(t.pk),
                "agent": t.session.agent,
                "session": t.session.key,
                "prompt": ((t.pending or {}).get("request") or {}).get("prompt") or "",
                "by": listings.requested_by(t),
                "age": _ago(t.parked_at, now),
                "seen": (t.session_id, t.session.owner_id, t.pk),
            }
            for t in parked[:LIST_ROWS]
        ],
        # sessions a person answers in (takeover), longest first
        "taken_over": [
            {
                "agent": t.session.agent,
                "session": t.session.key,
                "by": t.operator_name,
                "age": _ago(t.started_at, now),
                "messages": t.messages,
                "url": reverse("admin:sessions_app_session_change", args=[t.session_id]),
                "seen": (t.session_id, t.session.owner_id, ""),
            }
            for t in m.Takeover.objects.filter(ended_at__isnull=True)
            .select_related("session")
            .order_by("started_at")[:LIST_ROWS]
        ],
        "failures": [{**row, "error": ""} for row in _turn_rows(failures, now, when="updated_at")],
        "retried": _turn_rows(retried, now),
        "schedules": schedules,
        "workers": workers,
        "workers_alive": sum(1 for w in workers if not w["stale"]),
        "beat_seconds": settings.JUNE_WORKER_BEAT_SECONDS,
        "deliveries": [
            {
                "id": d.pk,
                "agent": d.agent,
                "session": d.session_key,
                "turn_id": d.turn_id,
                "url": d.url,
                "status": d.status,
                "attempts": d.attempts,
                "error": (d.last_error or "")[:200],
                "response_status": d.response_status,
                "age": _ago(d.updated_at, now),
            }
            for d in failing
        ],
        "usage_today": total_today,
        "usage_per_agent": per_agent_today,
        "usage_per_user": dict(list(per_user_today.items())[:LIST_ROWS]),
        "usage_per_day": per_day,
        "quota_per_user": quotas.usage_per_user(now=now.timestamp()),
        "limits": quotas.limits_table(),
    }


#: the dashboard's lists that show what users wrote (the audit log records who saw them)
SHOWN = ("running", "expired", "queued", "parked", "taken_over", "failures", "retried")


def dashboard_view(request):
    data = dashboard_data()
    audit.audit_staff_list(
        request=request, action=m.AuditAction.DASHBOARD_READ, seen=[row["seen"] for name in SHOWN for row in data[name]]
    )
    context = {**admin.site.each_context(request), "title": "Operator dashboard", **data}
    if request.GET.get("fragment"):
        return TemplateResponse(request, "admin/june/_dashboard_body.html", context)
    return TemplateResponse(request, "admin/june/dashboard.html", context)


__all__ = [
    "agent_model",
    "cost_of",
    "dashboard_data",
    "dashboard_view",
    "price_for",
    "session_usage",
    "usage_per_user",
    "usage_totals",
]
