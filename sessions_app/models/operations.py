"""The site's access and operations tables: rate counters and quota overrides, API tokens,
the workers' heartbeats, the notifications outbox; and the user model's name field and keys."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


class RateCounter(models.Model):
    """How many turns a subject started in one window (``sessions_app.quotas``): a row per
    (scope, subject, window), counted by one conditional upsert, so no race admits one over the
    limit and the count holds across processes, sites and restarts. Rows of past windows are
    deleted as new windows open."""

    scope = models.CharField(max_length=32)  # user | webhook | schedule
    subject = models.CharField(max_length=200)  # a user's pk, an agent's name, a schedule's name
    window_start = models.BigIntegerField()  # epoch seconds
    n = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "subject", "window_start"], name="rate_counter_key")]
        indexes = [models.Index(fields=["window_start"], name="rate_counter_window")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.subject}@{self.window_start} = {self.n}"


class QuotaOverride(models.Model):
    """A user's or a group's own limits, over the site's settings (``sessions_app.quotas``),
    edited in the admin. Blank: the setting; 0: no limit. A user's own row wins over their
    groups'; among their groups, the most generous limit."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    group = models.OneToOneField("auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    turns_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="blank: JUNE_RATE_TURNS_PER_MINUTE; 0: no limit"
    )
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="blank: JUNE_QUOTA_TOKENS_PER_DAY; 0: no limit"
    )
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False),
                name="quota_override_user_or_group",
                violation_error_message="Choose a user or a group (one, not both).",
            )
        ]

    def __str__(self) -> str:
        return f"limits of {self.user or self.group}"


class ApiToken(models.Model):
    """A bearer token for the HTTP API; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user, name: str = "") -> tuple[ApiToken, str]:
        raw = "june_" + secrets.token_urlsafe(32)
        return cls.objects.create(user=user, name=name, prefix=raw[:12], key_hash=cls.hash(raw)), raw


class WorkerBeat(models.Model):
    """A worker process's worker beat, its liveness (``sessions_app.workers.beat``): written every
    ``JUNE_WORKER_BEAT_SECONDS`` from its runner's event loop, deleted when it stops cleanly. A
    row not seen for ``BEATS_MISSED`` beats is a worker gone (killed, frozen, or its loop held)."""

    #: ``host:pid``, as a lease's owner names the worker that holds it
    id = models.CharField(primary_key=True, max_length=300)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()
    #: the turns its runner drives now, and the most it drives at once (``JUNE_TURNS_PER_WORKER``)
    running = models.PositiveIntegerField(default=0)
    slots = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "worker heartbeat"


def username_field() -> str:
    """The user model's login name field (``username``, or a custom model's ``USERNAME_FIELD``):
    June looks users up and searches them by it, never by a field name of its own choosing."""
    from django.contrib.auth import get_user_model

    return get_user_model().USERNAME_FIELD


def user_keys(texts: Iterable[str]) -> dict[str, Any]:
    """The user model's primary keys that ``texts`` spell (``str(pk)``, as rate counters and
    tokens keep a user; an integer, a UUID or a string alike), by their text; a text that spells
    no key of that type is left out."""
    from django.contrib.auth import get_user_model

    pk = get_user_model()._meta.pk
    out: dict[str, Any] = {}
    for text in texts:
        try:
            out[text] = pk.to_python(text)
        except ValidationError:
            continue
    return out


class NotificationState(models.TextChoices):
    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    FAILED = "failed", "failed"  # given up after JUNE_NOTIFY_MAX_ATTEMPTS
    SKIPPED = "skipped", "skipped"  # its park was answered before it went out
    HELD = "held", "held"  # a failure waiting for its digest


class Notification(models.Model):
    """A notification's outbox row (``sessions_app.notify``): written by the park sweep (once
    per park, ``key`` unique), sent by the sender with backoff, its state visible in the admin."""

    key = models.CharField(max_length=300, unique=True)
    kind = models.CharField(max_length=16)  # park | reminder | failure | digest
    channel = models.CharField(max_length=16)  # email | webhook
    turn_id = models.CharField(max_length=32, blank=True, default="")
    input_id = models.CharField(max_length=200, blank=True, default="")
    recipients = models.JSONField(default=list, blank=True)
    subject = models.CharField(max_length=300, blank=True, default="")
    body = models.TextField(blank=True, default="")
    state = models.CharField(max_length=16, choices=NotificationState.choices, default=NotificationState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["state", "next_at"], name="notification_due")]
