"""``JUNE_NOTIFY_*`` settings (declared in june/settings.py), read at call time."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class NotifyConfig:
    email: bool  # JUNE_NOTIFY_EMAIL: mail the users who may answer (Django's email backend)
    webhook_url: str  # JUNE_NOTIFY_WEBHOOK_URL: a Slack/Teams incoming webhook ("" = none)
    base_url: str  # JUNE_NOTIFY_BASE_URL: prefixed to the inbox card's path in the link
    remind_after: float  # JUNE_NOTIFY_REMIND_AFTER seconds (0 = no reminder)
    digest_every: float  # JUNE_NOTIFY_DIGEST_SECONDS: failures are batched this long
    max_attempts: int  # JUNE_NOTIFY_MAX_ATTEMPTS before a row is given up (failed)
    backoff: float  # JUNE_NOTIFY_BACKOFF seconds: the first retry's delay, doubled each time
    backoff_cap: float  # JUNE_NOTIFY_BACKOFF_CAP seconds
    timeout: float  # JUNE_NOTIFY_TIMEOUT seconds for a webhook POST


def config() -> NotifyConfig:
    return NotifyConfig(
        email=bool(settings.JUNE_NOTIFY_EMAIL),
        webhook_url=settings.JUNE_NOTIFY_WEBHOOK_URL or "",
        base_url=(settings.JUNE_NOTIFY_BASE_URL or "").rstrip("/"),
        remind_after=float(settings.JUNE_NOTIFY_REMIND_AFTER),
        digest_every=float(settings.JUNE_NOTIFY_DIGEST_SECONDS),
        max_attempts=int(settings.JUNE_NOTIFY_MAX_ATTEMPTS),
        backoff=float(settings.JUNE_NOTIFY_BACKOFF),
        backoff_cap=float(settings.JUNE_NOTIFY_BACKOFF_CAP),
        timeout=float(settings.JUNE_NOTIFY_TIMEOUT),
    )
