"""The operator console: the dashboard, a turn's timeline, and
tokens and cost per turn, session, agent and day.

- ``/admin/june/dashboard/`` — running, queued and parked turns (parked by age), running turns
  whose lease expired, failures and retries in the last hour, schedules due next, failing
  webhook deliveries, tokens and cost today and per agent, users against their rate limit and
  token quota (``quotas.usage_per_user``); the page re-reads its body every
  few seconds (``static/june/dashboard.js``; ``?fragment=1`` is the body alone).
- :func:`timeline` — a turn as a list of steps (start, duration, tool, input, result, tokens),
  read from its events and messages; the turn admin page draws it.
- Cost: ``JUNE_MODEL_PRICES`` (settings, or the environment as JSON) maps a model id (or its
  prefix) to US dollars per million tokens; defaults for the Anthropic models, zero for demo.
  A turn's model is its agent's (``agents_app.providers.provider_name`` and ``model_config``).
"""

from __future__ import annotations

import datetime as dt
import json
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
from sessions_app import health, quotas, selectors
from sessions_app import models as m
from sessions_app.pricing import TOKEN_KEYS, Usage, cost_of, price_for, prices  # noqa: F401 (re-exported)
from sessions_app.pricing import usage_totals as _usage_totals
from sessions_app.store import eventlog
from sessions_app.wiring import agent_model

LIST_ROWS = 20
RESULT_SHOWN = 400
RESULT_MAX = 20_000
REFRESH_SECONDS = 5


def usage_totals(turns) -> tuple[Usage, dict[str, Usage], dict[dt.date, Usage]]:
    """Totals over a queryset of turns: overall, per agent, per (local) day."""
    return _usage_totals(turns, agent_model)


def usage_per_user(turns) -> dict[str, Usage]:
    """Totals per user (the owner of the turn's session: a subagent's session is its parent's
    owner's); each turn's own calls at its own agent's price. Sessions without an owner
    (webhooks, schedules) under "—"."""
    per_user: dict[str, Usage] = defaultdict(Usage)
    rows = turns.values_list("session__agent", f"session__owner__{m.username_field()}", "usage").iterator(chunk_size=2000)
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


def seconds_text(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def turn_url(turn_id: str) -> str:
    try:
        return reverse("admin:sessions_app_turn_change", args=[turn_id])
    except NoReverseMatch:
        return ""


def _turn_rows(qs, now: dt.datetime, *, when: str = "created_at") -> list[dict[str, Any]]:
    rows = []
    for t in qs.select_related("session")[:LIST_ROWS]:
        at = getattr(t, when, None)
        rows.append({"id": t.pk, "url": turn_url(t.pk), "agent": t.session.agent, "session": t.session.key,
                     "status": t.status, "phase": t.phase or "", "attempts": t.attempts,
                     "owner": t.lease_owner or "", "age": _ago(at, now),
                     "lease": lease_text(t, now.timestamp()),
                     "text": str((t.input or {}).get("text") or "")[:80]})
    return rows


def dashboard_data(now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    epoch = now.timestamp()
    hour_ago = now - dt.timedelta(hours=1)
    running = m.Turn.objects.filter(status=m.TurnStatus.RUNNING)
    live = running.filter(lease_expires_at__gte=epoch).order_by("created_at")
    expired = running.filter(lease_expires_at__lt=epoch).order_by("lease_expires_at")
    queued = m.Turn.objects.filter(status=m.TurnStatus.QUEUED).order_by("created_at")
    parked = selectors.parked_requests()
    failed_ids = (m.Event.objects.filter(type="turn.failed", created_at__gte=hour_ago)
                  .values_list("turn_id", flat=True))
    failures = m.Turn.objects.filter(pk__in=list(failed_ids[:500])).order_by("-updated_at")
    retried = m.Turn.objects.filter(attempts__gt=1, created_at__gte=hour_ago).order_by("-created_at")
    counts = dict(m.Turn.objects.filter(status__in=[m.TurnStatus.RUNNING, m.TurnStatus.QUEUED, m.TurnStatus.SUSPENDED])
                  .values("status").annotate(n=Count("id")).values_list("status", "n"))
    oldest_queued = queued.aggregate(at=Min("created_at"))["at"]
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    total_today, per_agent_today, _ = usage_totals(m.Turn.objects.filter(created_at__gte=today))
    per_user_today = usage_per_user(m.Turn.objects.filter(created_at__gte=today))
    _, _, per_day = usage_totals(m.Turn.objects.filter(created_at__gte=today - dt.timedelta(days=6)))
    schedules = []
    for s in Schedule.objects.exclude(repeats=0).order_by("next_run")[:10]:
        schedules.append({"name": s.name or s.func, "func": s.func, "next_run": s.next_run,
                          "in": seconds_text((s.next_run - now).total_seconds()) if s.next_run and s.next_run > now
                          else "due now"})
    workers = [{**w, "seen": seconds_text(w["age"]), "up": _ago(w["started_at"], now)}
               for w in health.worker_rows(now=now)]
    failing = (WebhookDelivery.objects.exclude(status=DeliveryStatus.DELIVERED)
               .filter(attempts__gt=0).order_by("-updated_at")[:LIST_ROWS])
    return {
        "now": now,
        "refresh": REFRESH_SECONDS,
        "counts": {"running": live.count(), "expired": expired.count(), "queued": counts.get("queued", 0),
                   "parked": counts.get("suspended", 0), "failed_hour": failures.count(),
                   "retried_hour": retried.count()},
        "oldest_queued": _ago(oldest_queued, now) if oldest_queued else "",
        "running": _turn_rows(live, now),
        "expired": _turn_rows(expired, now),
        "queued": _turn_rows(queued, now),
        "parked": [{"id": t.pk, "url": turn_url(t.pk), "agent": t.session.agent, "session": t.session.key,
                    "prompt": ((t.pending or {}).get("request") or {}).get("prompt") or "",
                    "by": selectors.requested_by(t), "age": _ago(t.parked_at, now)}
                   for t in parked[:LIST_ROWS]],
        "failures": [{**row, "error": ""} for row in _turn_rows(failures, now, when="updated_at")],
        "retried": _turn_rows(retried, now),
        "schedules": schedules,
        "workers": workers,
        "workers_alive": sum(1 for w in workers if not w["stale"]),
        "beat_seconds": settings.JUNE_WORKER_BEAT_SECONDS,
        "deliveries": [{"id": d.pk, "agent": d.agent, "session": d.session_key, "turn_id": d.turn_id,
                        "url": d.url, "status": d.status, "attempts": d.attempts,
                        "error": (d.last_error or "")[:200], "response_status": d.response_status,
                        "age": _ago(d.updated_at, now)} for d in failing],
        "usage_today": total_today,
        "usage_per_agent": per_agent_today,
        "usage_per_user": dict(list(per_user_today.items())[:LIST_ROWS]),
        "usage_per_day": per_day,
        "quota_per_user": quotas.usage_per_user(now=now.timestamp()),
        "limits": quotas.limits_table(),
    }


def dashboard_view(request):
    context = {**admin.site.each_context(request), "title": "Operator dashboard", **dashboard_data()}
    if request.GET.get("fragment"):
        return TemplateResponse(request, "admin/june/_dashboard_body.html", context)
    return TemplateResponse(request, "admin/june/dashboard.html", context)


# -- a turn as a timeline -------------------------------------------------------------------------------

PHASES = {
    "before_provider": "about to call the model",
    "provider_started": "calling the model (a crash here re-drives this model step)",
    "tool_request_recorded": "about to run a tool (recorded before it runs)",
    "committed": "its last step is committed",
    "parked": "parked: waiting for an answer",
}


def phase_text(turn: m.Turn) -> str:
    if not turn.phase:
        return "not started" if turn.status == m.TurnStatus.QUEUED else "—"
    words = PHASES.get(turn.phase, turn.phase)
    tool = ((turn.journal or {}).get("tool_request") or {}).get("name")
    return f"{words} ({tool})" if tool and turn.phase == "tool_request_recorded" else words


def lease_text(turn: m.Turn, now: float) -> str:
    if turn.lease_expires_at is None:
        return "no lease" if turn.status != m.TurnStatus.RUNNING else "no lease yet"
    left = turn.lease_expires_at - now
    owner = turn.lease_owner or "nobody"
    if turn.status == m.TurnStatus.QUEUED and owner.startswith("requeued:"):  # the sweeper's mark (REQUEUED)
        return f"none; re-enqueued by the sweeper ({owner.removeprefix('requeued:')}) {seconds_text(-left)} ago"
    if turn.status != m.TurnStatus.RUNNING:
        return f"released (last held by {owner})"
    if owner.startswith("swept:"):
        return f"expired; re-enqueued by the sweeper {seconds_text(-left)} ago"
    if left >= 0:
        return f"held by {owner} for {seconds_text(left)} more"
    return f"expired {seconds_text(-left)} ago (held by {owner}); the sweeper re-enqueues it"


def _short(value: Any) -> tuple[str, str]:
    """(the first characters, the whole text up to RESULT_MAX) of a JSON value."""
    text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False,
                                                            default=str)
    full = text if len(text) <= RESULT_MAX else text[:RESULT_MAX] + f"\n… ({len(text) - RESULT_MAX} more characters)"
    short = text if len(text) <= RESULT_SHOWN else text[:RESULT_SHOWN] + "…"
    return short, full


def timeline(turn: m.Turn) -> list[dict[str, Any]]:
    """The turn's steps from its events (and its messages' token counts), in time order."""
    events = list(eventlog.timed(turn.logged().order_by("seq")
                                 .only("seq", "type", "turn_id", "data", "created_at")))
    data = eventlog.restore((turn.session_id, turn.generation, e.type, e.turn_id, e.data) for e in events)
    usage_at = {idx: (d or {}).get("usage") or {} for idx, d in turn.written().filter(role="assistant")
                .values_list("index", "data")}
    steps: list[dict[str, Any]] = []
    open_tools: dict[str, dict[str, Any]] = {}
    asked: dict[str, Any] = {}
    previous: dt.datetime | None = None
    for e, d in zip(events, data):
        d = d or {}
        at = e.at
        row: dict[str, Any] | None = None
        if e.type == "turn.started":
            trigger = d.get("trigger") or "inbound"
            short, full = _short(d.get("text") or "")
            row = {"kind": "start", "name": "resumed after the answer" if trigger == "resume" else f"started ({trigger})",
                   "input": short, "input_full": full}
        elif e.type == "message.completed":
            short, full = _short(d.get("text") or "")
            usage = usage_at.get(d.get("index"), {})
            row = {"kind": "model", "name": "model step", "result": short, "result_full": full,
                   "duration": seconds_text((at - previous).total_seconds()) if previous else "",
                   "tokens": usage, "cost": cost_of(usage, agent_model(turn.session.agent)) if usage else None}
        elif e.type == "action.requested":
            call = d.get("call") or {}
            short, full = _short(call.get("input"))
            row = {"kind": "tool", "name": call.get("name") or "?", "input": short, "input_full": full,
                   "state": "running"}
            open_tools[str(call.get("id"))] = row
        elif e.type == "action.completed":
            tool = open_tools.pop(str(d.get("call_id")), None)
            value = d.get("error") if d.get("error") else d.get("result")
            short, full = _short(value)
            if tool is None:
                row = tool = {"kind": "tool", "name": d.get("name") or "?", "at": at, "input": "", "input_full": ""}
            tool.update(state="error" if d.get("error") else "completed", result=short, result_full=full,
                        duration=seconds_text((at - tool["at"]).total_seconds()))
        elif e.type == "input.requested":
            request = d.get("request") or {}
            row = {"kind": "input", "name": "asked for an answer", "input": request.get("prompt") or "",
                   "input_full": json.dumps(request, indent=1, default=str), "state": "waiting"}
            asked[str(request.get("id"))] = row
        elif e.type == "input.answered":
            question = asked.get(str(d.get("input_id")))
            started = question["at"] if question else None
            if question is not None:  # it no longer waits (it read "waiting" after the answer)
                question["state"] = "answered"
            who = d.get("name") or d.get("by") or "someone"
            short, full = _short(d.get("answer"))
            row = {"kind": "answer", "name": f"answered by {who}" + (f" via {d['via']}" if d.get("via") else ""),
                   "result": short, "result_full": full,
                   "duration": seconds_text((at - started).total_seconds()) if started else ""}
        elif e.type in ("turn.completed", "turn.failed", "turn.cancelled"):
            detail = d.get("error") or d.get("reason") or ""
            if d.get("limited"):
                detail = f"at its limit of {str(d['limited']).replace('_', ' ')}: the last model call answered, no tools"
            # its name says how it ended (no state beside it: it read "completed completed")
            row = {"kind": "end", "name": e.type.removeprefix("turn."), "result": str(detail)[:RESULT_SHOWN],
                   "result_full": str(detail)}
        if row is not None:
            row.setdefault("at", at)
            row["seq"] = e.seq
            steps.append(row)
        previous = at
    if steps:
        first = steps[0]["at"]
        for row in steps:
            row["offset"] = seconds_text((row["at"] - first).total_seconds())
    return steps


__all__ = ["agent_model", "cost_of", "dashboard_data", "dashboard_view", "lease_text", "phase_text",
           "price_for", "session_usage", "timeline", "usage_per_user", "usage_totals"]
