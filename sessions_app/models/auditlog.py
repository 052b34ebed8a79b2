"""The audit log: one append-only row per staff access to someone else's data, per answer, per
takeover and hand-back, per erasure and per retention sweep (``sessions_app.audit`` writes them,
docs/privacy.md says what they hold).

Nothing here points at another row with a foreign key: a row outlives the session, the turn and
the users it names (a deletion cascading into it would be an UPDATE or a DELETE, which the
database refuses on PostgreSQL: migration ``0002_database``). The person whose data was
touched is kept as a keyed digest of their user id (``subject_of``), never the id itself, so
erasing a user leaves no identifier of theirs here while an auditor holding the site's key can
still ask "who read this user's data"."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditAction(models.TextChoices):
    SESSION_READ = "session.read", "read a session"
    ARCHIVE_READ = "archive.read", "read an archived generation"
    TURN_READ = "turn.read", "read a turn"
    ATTACHMENT_READ = "attachment.read", "downloaded an attachment"
    EXPORT_READ = "export.read", "downloaded an export"
    SEARCH = "search", "searched every session"
    DASHBOARD_READ = "dashboard.read", "saw a session on the operator dashboard"
    INBOX_READ = "inbox.read", "saw a session's requests in the approval inbox"
    ANSWER = "answer", "answered a request"
    TAKEOVER = "takeover", "took over a session"
    HAND_BACK = "handback", "handed a session back"
    ERASE = "erase", "erased a user's data"
    RETENTION = "retention", "retention sweep"
    AUDIT_PURGE = "audit.purge", "purged old audit rows"


def subject_of(user_id: Any) -> str:
    """The audit log's name for the user whose data an action touched: a keyed digest of their
    id (``""`` for no user), the same for the same user on every row."""
    if user_id is None or user_id == "":
        return ""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, f"june-audit-subject:{user_id}".encode(), hashlib.sha256).hexdigest()[:32]


class AuditEvent(models.Model):
    """Who did what to which data, when, from where. Written once, never changed."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    #: the acting user's id and login name when they acted (``""``: the site itself, a sweep)
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor = models.CharField(max_length=150, blank=True, default="")
    #: ``subject_of`` the owner of the data touched
    subject = models.CharField(max_length=64, blank=True, default="", db_index=True)
    session_id = models.BigIntegerField(null=True, blank=True)
    generation = models.IntegerField(null=True, blank=True)
    turn_id = models.CharField(max_length=32, blank=True, default="")
    attachment_id = models.CharField(max_length=32, blank=True, default="")
    remote_addr = models.CharField(max_length=64, blank=True, default="")
    #: what the action needs said besides (counts, a search's words, a choice): never a user's text
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["session_id", "at"], name="audit_session")]
        verbose_name = "audit event"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor or 'june'} {self.action}"
