"""``JUNE_NOTIFY_*`` settings, read at call time (tests override them)."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _f(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


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
        email=os.environ.get("JUNE_NOTIFY_EMAIL", "1").lower() in ("1", "true", "yes", "on"),
        webhook_url=os.environ.get("JUNE_NOTIFY_WEBHOOK_URL", ""),
        base_url=os.environ.get("JUNE_NOTIFY_BASE_URL", "").rstrip("/"),
        remind_after=_f("JUNE_NOTIFY_REMIND_AFTER", 3600),
        digest_every=_f("JUNE_NOTIFY_DIGEST_SECONDS", 900),
        max_attempts=int(_f("JUNE_NOTIFY_MAX_ATTEMPTS", 8)),
        backoff=_f("JUNE_NOTIFY_BACKOFF", 30),
        backoff_cap=_f("JUNE_NOTIFY_BACKOFF_CAP", 3600),
        timeout=_f("JUNE_NOTIFY_TIMEOUT", 10),
    )
