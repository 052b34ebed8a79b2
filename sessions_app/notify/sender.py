"""Delivering due notification rows: e-mail through Django's email backend, a webhook as a
JSON ``{"text": …}`` POST (what a Slack or Teams incoming webhook accepts). A failure is
retried with exponential backoff up to ``JUNE_NOTIFY_MAX_ATTEMPTS``, then the row is failed.
A park's row is skipped when the park was answered before it went out."""

from __future__ import annotations

import datetime as dt
import json
import logging
import urllib.request

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from sessions_app import models as m
from sessions_app.notify.options import NotifyConfig, config

log = logging.getLogger(__name__)
N = m.Notification
S = m.NotificationState


def _still_parked(row: m.Notification) -> bool:
    pending = (
        m.Turn.objects.filter(pk=row.turn_id, status=m.TurnStatus.SUSPENDED).values_list("pending", flat=True).first()
    )
    return bool(pending) and str(((pending or {}).get("request") or {}).get("id")) == row.input_id


def _post(url: str, text: str, cfg: NotifyConfig) -> None:
    data = json.dumps({"text": text}).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=cfg.timeout) as resp:  # noqa: S310 (an operator's URL)
        if not 200 <= resp.status < 300:
            raise OSError(f"webhook answered {resp.status}")


def _send(row: m.Notification, cfg: NotifyConfig) -> None:
    if row.channel == "email":
        send_mail(row.subject, row.body, None, list(row.recipients), fail_silently=False)
    elif row.channel == "webhook":
        _post(row.recipients[0], f"*{row.subject}*\n{row.body}", cfg)
    else:
        raise ValueError(f"unknown channel {row.channel!r}")


def send_due(*, now: dt.datetime | None = None, limit: int = 100) -> dict[str, int]:
    """Send the rows due now; returns counts by outcome."""
    cfg = config()
    now = now or timezone.now()
    out = {"sent": 0, "retry": 0, "failed": 0, "skipped": 0}
    ids = list(
        N.objects.filter(state=S.PENDING, next_at__lte=now).order_by("next_at").values_list("pk", flat=True)[:limit]
    )
    for pk in ids:
        with transaction.atomic():
            row = N.objects.select_for_update().filter(pk=pk, state=S.PENDING).first()
            if row is None:
                continue
            if row.kind in ("park", "reminder") and not _still_parked(row):
                row.state = S.SKIPPED
                out["skipped"] += 1
            else:
                try:
                    _send(row, cfg)
                    row.state = S.SENT
                    out["sent"] += 1
                except Exception as exc:  # noqa: BLE001 (any transport error is retried)
                    row.attempts += 1
                    row.last_error = f"{type(exc).__name__}: {exc}"[:2000]
                    if row.attempts >= cfg.max_attempts:
                        row.state = S.FAILED
                        out["failed"] += 1
                        log.warning("notification %s given up: %s", row.pk, row.last_error)
                    else:
                        delay = min(cfg.backoff * 2 ** (row.attempts - 1), cfg.backoff_cap)
                        row.next_at = now + dt.timedelta(seconds=delay)
                        out["retry"] += 1
            row.save(update_fields=["state", "attempts", "last_error", "next_at", "updated_at"])
    return out


def notify_tick(*, now: dt.datetime | None = None) -> dict[str, int]:
    """One pass: write park rows and reminders, hold new failures, fold a digest, send what is due."""
    from sessions_app.notify.failures import collect_failures
    from sessions_app.notify.outbox import fold_digest, notify_parks

    made = notify_parks(now=now)
    failures = collect_failures(now=now)
    folded = fold_digest(now=now)
    return {"written": made, "failures": failures, "folded": folded, **send_due(now=now)}
