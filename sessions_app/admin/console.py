"""The operator console: the dashboard, and tokens and cost per turn, session, agent and day
(a turn's timeline: ``admin.timeline``).

- ``/admin/june/dashboard/`` — running, queued and parked turns (parked by age), running turns
  whose lease expired, failures and retries in the last hour, schedules due next, failing
  webhook deliveries, tokens and cost today and per agent, users against their rate limit and
  token quota; what it reads: ``sessions_app/dashboard.py``; the page re-reads its body every
  few seconds (``static/june/dashboard.js``; ``?fragment=1`` is the body alone).
- Cost: ``JUNE_MODEL_PRICES`` (settings, or the environment as JSON) maps a model id (or its
  prefix) to US dollars per million tokens; defaults for the Anthropic models, zero for demo.
  A turn's model is its agent's (``agents_app.providers.provider_name`` and ``model_config``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from sessions_app import audit, dashboard, health, listings
from sessions_app import models as m
from sessions_app.dashboard import LIST_ROWS, session_usage, usage_per_user, usage_totals  # noqa: F401 (re-exported)
from sessions_app.pricing import TOKEN_KEYS, Usage, cost_of, price_for, prices  # noqa: F401 (re-exported)
from sessions_app.wiring import agent_model

from .timeline import lease_text, seconds_text

REFRESH_SECONDS = 5


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
    """The dashboard's context: ``sessions_app.dashboard``'s reads, as rows to show."""
    now = now or timezone.now()
    turns = dashboard.turn_lists(now)
    counts = dashboard.status_counts()
    oldest_queued = dashboard.oldest_queued()
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    schedules = [
        {
            "name": s.name or s.func,
            "func": s.func,
            "next_run": s.next_run,
            "in": seconds_text((s.next_run - now).total_seconds()) if s.next_run and s.next_run > now else "due now",
        }
        for s in dashboard.schedules_due()
    ]
    workers = [
        {**w, "seen": seconds_text(w["age"]), "up": _ago(w["started_at"], now)} for w in health.worker_rows(now=now)
    ]
    return {
        "now": now,
        "refresh": REFRESH_SECONDS,
        "counts": {
            "running": turns["running"].count(),
            "expired": turns["expired"].count(),
            "queued": counts.get("queued", 0),
            "parked": counts.get("suspended", 0),
            "failed_hour": turns["failures"].count(),
            "retried_hour": turns["retried"].count(),
        },
        "oldest_queued": _ago(oldest_queued, now) if oldest_queued else "",
        "running": _turn_rows(turns["running"], now),
        "expired": _turn_rows(turns["expired"], now),
        "queued": _turn_rows(turns["queued"], now),
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
            for t in listings.parked_requests()[:LIST_ROWS]
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
            for t in dashboard.open_takeovers()
        ],
        "failures": [{**row, "error": ""} for row in _turn_rows(turns["failures"], now, when="updated_at")],
        "retried": _turn_rows(turns["retried"], now),
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
            for d in dashboard.failing_deliveries()
        ],
        **dashboard.usage_since(today),
        "quota_per_user": dashboard.quota_per_user(now=now.timestamp()),
        "limits": dashboard.limits_table(),
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
