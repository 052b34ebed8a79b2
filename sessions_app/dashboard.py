"""The operator console's reads (``admin/console.py`` shows them): turns by state, failures and
retries in the last hour, tokens and cost (today, per agent, per user, per day, per session),
the schedules due next, open takeovers, failing webhook deliveries, and users against their rate
limit and token quota. Querysets and plain values: the console makes its rows from them."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from typing import Any

from django.db.models import Count, Min
from django_q.models import Schedule

from agents_app.models import DeliveryStatus, WebhookDelivery
from sessions_app import models as m
from sessions_app import quotas
from sessions_app.pricing import Usage
from sessions_app.pricing import usage_totals as _usage_totals
from sessions_app.quotas import SCHEDULE, USER, WEBHOOK, Limits
from sessions_app.wiring import agent_model

#: how many rows a list of the dashboard shows
LIST_ROWS = 20
#: the turns failed in the last hour it looks at (their ids from the events)
FAILURES_READ = 500


def turn_lists(now: dt.datetime) -> dict[str, Any]:
    """Querysets of turns, each in the order shown: running with a live lease, running with an
    expired one, queued, failed in the last hour, retried in the last hour."""
    epoch = now.timestamp()
    hour_ago = now - dt.timedelta(hours=1)
    running = m.Turn.objects.filter(status=m.TurnStatus.RUNNING)
    failed_ids = m.Event.objects.filter(type="turn.failed", created_at__gte=hour_ago).values_list("turn_id", flat=True)
    return {
        "running": running.filter(lease_expires_at__gte=epoch).order_by("created_at"),
        "expired": running.filter(lease_expires_at__lt=epoch).order_by("lease_expires_at"),
        "queued": m.Turn.objects.filter(status=m.TurnStatus.QUEUED).order_by("created_at"),
        "failures": m.Turn.objects.filter(pk__in=list(failed_ids[:FAILURES_READ])).order_by("-updated_at"),
        "retried": m.Turn.objects.filter(attempts__gt=1, created_at__gte=hour_ago).order_by("-created_at"),
    }


def status_counts() -> dict[str, int]:
    """How many turns are running, queued and parked (suspended), by status: one query."""
    return dict(
        m.Turn.objects.filter(status__in=[m.TurnStatus.RUNNING, m.TurnStatus.QUEUED, m.TurnStatus.SUSPENDED])
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )


def oldest_queued() -> dt.datetime | None:
    return m.Turn.objects.filter(status=m.TurnStatus.QUEUED).aggregate(at=Min("created_at"))["at"]


def schedules_due(rows: int = 10) -> list[Any]:
    """django-q2's schedules that still repeat, the next due first."""
    return list(Schedule.objects.exclude(repeats=0).order_by("next_run")[:rows])


def open_takeovers() -> list[m.Takeover]:
    """Sessions a person answers in now, the longest first."""
    return list(
        m.Takeover.objects.filter(ended_at__isnull=True).select_related("session").order_by("started_at")[:LIST_ROWS]
    )


def failing_deliveries() -> list[WebhookDelivery]:
    """Webhook deliveries tried and not delivered, the latest first."""
    return list(
        WebhookDelivery.objects.exclude(status=DeliveryStatus.DELIVERED)
        .filter(attempts__gt=0)
        .order_by("-updated_at")[:LIST_ROWS]
    )


# -- tokens and cost ------------------------------------------------------------------------------------


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


def usage_since(day: dt.datetime) -> dict[str, Any]:
    """Tokens and cost since ``day`` (a local midnight): in all, per agent, per user, and per
    day over the week that ends with it."""
    since = m.Turn.objects.filter(created_at__gte=day)
    total, per_agent, _ = usage_totals(since)
    _, _, per_day = usage_totals(m.Turn.objects.filter(created_at__gte=day - dt.timedelta(days=6)))
    per_user = usage_per_user(since)
    return {
        "usage_today": total,
        "usage_per_agent": per_agent,
        "usage_per_user": dict(list(per_user.items())[:LIST_ROWS]),
        "usage_per_day": per_day,
    }


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


# -- users against their limits ------------------------------------------------------------------------


def quota_per_user(*, now: float | None = None, rows: int = LIST_ROWS) -> list[dict[str, Any]]:
    """Users active today with their turns this minute, their busiest minute today and their
    tokens today, against the limits (the most tokens first)."""
    now = time.time() if now is None else now
    minute, since = quotas.window_of(USER, now), quotas.day_start(now)
    counts: dict[str, dict[str, int]] = {}
    for subject, window, n in m.RateCounter.objects.filter(scope=USER.scope, window_start__gte=since).values_list(
        "subject", "window_start", "n"
    ):
        c = counts.setdefault(subject, {"now": 0, "peak": 0, "today": 0})
        c["peak"] = max(c["peak"], n)
        c["today"] += n
        if window == minute:
            c["now"] = n
    spent = dict(
        m.Turn.objects.filter(created_by__isnull=False, created_at__gte=quotas.day_began(now))
        .values("created_by_id")
        .annotate(n=quotas.tokens_sum(*quotas.TREE_TOKENS))
        .values_list("created_by_id", "n")
    )
    # a user is the text of their key in a rate counter and the key itself in a turn: both
    # by the text, whatever type the user model's key has (integer, UUID, string)
    tokens_of = {str(k): int(n or 0) for k, n in spent.items()}
    keys = m.user_keys(set(counts) | set(tokens_of))
    names = {
        str(pk): name
        for pk, name in m.Turn._meta.get_field("created_by")
        .related_model.objects.filter(pk__in=list(keys.values()))
        .values_list("pk", m.username_field())
    }
    own = quotas.limits_of_users(list(keys.values()))
    out = []
    for uid in set(counts) | set(tokens_of):
        c = counts.get(uid, {"now": 0, "peak": 0, "today": 0})
        tokens = tokens_of.get(uid, 0)
        mine = own.get(keys[uid], Limits()) if uid in keys else Limits()
        rate_cap = USER.limit() if mine.turns_per_minute is None else mine.turns_per_minute
        token_cap = quotas.limit("JUNE_QUOTA_TOKENS_PER_DAY") if mine.tokens_per_day is None else mine.tokens_per_day
        out.append(
            {
                "user": names.get(uid, uid),
                "turns_minute": c["now"],
                "peak_minute": c["peak"],
                "turns_today": c["today"],
                "rate_limit": rate_cap,
                "tokens": tokens,
                "token_quota": token_cap,
                "tokens_pct": round(100 * tokens / token_cap) if token_cap else None,
                "own": mine != Limits(),
                "limited": bool((rate_cap and c["now"] >= rate_cap) or (token_cap and tokens >= token_cap)),
            }
        )
    out.sort(key=lambda r: (-r["tokens"], -r["turns_today"], str(r["user"])))
    return out[:rows]


def limits_table() -> list[dict[str, Any]]:
    """Each limit with its setting and value (0: off)."""
    return [
        {"what": "turns a minute, per user", "setting": USER.setting, "value": USER.limit()},
        {
            "what": "tokens a day, per user",
            "setting": "JUNE_QUOTA_TOKENS_PER_DAY",
            "value": quotas.limit("JUNE_QUOTA_TOKENS_PER_DAY"),
        },
        {
            "what": "tokens a day, per agent",
            "setting": "JUNE_QUOTA_AGENT_TOKENS_PER_DAY",
            "value": quotas.limit("JUNE_QUOTA_AGENT_TOKENS_PER_DAY"),
        },
        {"what": "webhook turns a minute, per agent", "setting": WEBHOOK.setting, "value": WEBHOOK.limit()},
        {"what": "runs an hour, per schedule", "setting": SCHEDULE.setting, "value": SCHEDULE.limit()},
    ]
