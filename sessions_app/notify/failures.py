"""Failures worth a notification, found by a look back over the last
``JUNE_NOTIFY_LOOKBACK`` seconds: turns failed, webhook deliveries given up, workers gone
(no beat for ``health.BEATS_MISSED`` beats), schedules whose last ``JUNE_NOTIFY_SCHEDULE_FAILURES``
runs failed. Each is held once (a unique key) and reaches people in the next digest."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

from agents_app.models import DeliveryStatus, ScheduleRun, WebhookDelivery
from sessions_app import models as m
from sessions_app.health import BEATS_MISSED
from sessions_app.notify.outbox import notify_failure


def _lookback() -> dt.timedelta:
    return dt.timedelta(seconds=float(settings.JUNE_NOTIFY_LOOKBACK))


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)[:300]
    return str(error or "")[:300]


def collect_failures(*, now: dt.datetime | None = None) -> int:
    """Hold a failure row for each failure seen since the look back; returns how many new."""
    now = now or timezone.now()
    since = now - _lookback()
    made = 0
    for tid, agent, error in m.Turn.objects.filter(status=m.TurnStatus.FAILED, ended_at__gte=since).values_list(
        "pk", "session__agent", "error"
    )[:500]:
        made += notify_failure("turn failed", f"{agent}: turn {tid}: {_error_text(error)}", key=f"failure:turn:{tid}")
    for d in WebhookDelivery.objects.filter(status=DeliveryStatus.FAILED, updated_at__gte=since)[:500]:
        made += notify_failure(
            "webhook delivery given up",
            f"{d.agent}: turn {d.turn_id} to {d.url}: {d.last_error[:300]}",
            key=f"failure:delivery:{d.pk}:{d.attempts}",
        )
    beat = float(getattr(settings, "JUNE_WORKER_BEAT_SECONDS", 5))
    gone = now - dt.timedelta(seconds=beat * BEATS_MISSED)
    for w in m.WorkerBeat.objects.filter(
        seen_at__lt=gone, seen_at__gte=since - dt.timedelta(seconds=beat * BEATS_MISSED)
    ):
        made += notify_failure(
            "worker gone",
            f"{w.pk}: last seen {w.seen_at:%Y-%m-%d %H:%M:%S}, running {w.running}",
            key=f"failure:worker:{w.pk}:{w.started_at.timestamp()}",
        )
    made += _schedules(since)
    return made


def _schedules(since: dt.datetime) -> int:
    n = int(settings.JUNE_NOTIFY_SCHEDULE_FAILURES)
    made = 0
    names = set(ScheduleRun.objects.filter(fired_at__gte=since).values_list("schedule", flat=True)[:200])
    for name in names:
        runs = list(ScheduleRun.objects.filter(schedule=name).order_by("-tick")[:n])
        failed = {
            t
            for t in m.Turn.objects.filter(pk__in=[r.turn_id for r in runs], status=m.TurnStatus.FAILED).values_list(
                "pk", flat=True
            )
        }
        if len(runs) == n and all(r.status == "failed" or r.turn_id in failed for r in runs):
            made += notify_failure(
                "schedule failing",
                f"{name}: its last {n} runs failed (last {runs[0].tick:%Y-%m-%d %H:%M})",
                key=f"failure:schedule:{name}:{runs[0].tick.timestamp()}",
            )
    return made
