"""Writing the audit log (``models.AuditEvent``) and its own retention.

Entry points call ``audit_staff_read`` when a staff user opens data that is not theirs (a
session, an archived generation, a turn, an attachment, an export), ``audit_staff_list`` when a
list shows it (the dashboard, the approval inbox), ``audit_record`` for the
rest (a search, a takeover, an erasure, a sweep); the store writes an answer's row in the
answer's own transaction. Rows are never changed: on PostgreSQL a trigger refuses an UPDATE,
and a DELETE unless ``audit_purge`` allowed it for rows older than its cutoff in its own
transaction (``june.audit_purge_before``, a transaction-local setting the trigger reads).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from sessions_app import models as m
from sessions_app.models.auditlog import AuditAction, subject_of

#: rows deleted per statement by ``audit_purge`` (each batch its own short transaction)
PURGE_BATCH = 1000
#: a list that re-reads itself (the dashboard) records a session it shows once in this long
LIST_QUIET_SECONDS = 600


def client_addr(request: Any) -> str:
    """The socket peer of ``request`` (behind a proxy, the proxy sets REMOTE_ADDR; a forwarded
    header is never trusted here)."""
    meta = getattr(request, "META", None) or {}
    return str(meta.get("REMOTE_ADDR") or "")[:64]


def _actor(user: Any) -> tuple[str, str]:
    if user is None or not getattr(user, "is_authenticated", False):
        return "", ""
    return str(user.pk), str(user.get_username())[:150]


def audit_record(
    *,
    action: AuditAction,
    user: Any = None,
    request: Any = None,
    session: m.Session | None = None,
    owner_id: Any = None,
    generation: int | None = None,
    turn_id: str = "",
    attachment_id: str = "",
    detail: dict[str, Any] | None = None,
) -> m.AuditEvent:
    """Append one row: ``user`` (default the request's) did ``action`` to ``session``'s data
    (its owner the subject, or ``owner_id`` when there is no session row)."""
    if user is None and request is not None:
        user = getattr(request, "user", None)
    actor_id, actor = _actor(user)
    if session is not None and owner_id is None:
        owner_id = session.owner_id
    return m.AuditEvent.objects.create(
        action=action,
        actor_id=actor_id,
        actor=actor,
        subject=subject_of(owner_id),
        session_id=session.pk if session is not None else None,
        generation=generation,
        turn_id=turn_id or "",
        attachment_id=attachment_id or "",
        remote_addr=client_addr(request),
        detail=detail or {},
    )


def audit_staff_read(
    *,
    request: Any,
    action: AuditAction,
    user: Any = None,
    session: m.Session | None = None,
    owner_id: Any = None,
    generation: int | None = None,
    turn_id: str = "",
    attachment_id: str = "",
) -> bool:
    """Record a read of data its reader (``user``, default the request's) does not own (a
    staff user's own sessions are not audited); True when a row was written."""
    user = user if user is not None else getattr(request, "user", None)
    reader = getattr(user, "pk", None)
    owner = session.owner_id if session is not None and owner_id is None else owner_id
    if reader is not None and owner is not None and str(owner) == str(reader):
        return False
    audit_record(
        action=action,
        user=user,
        request=request,
        session=session,
        owner_id=owner,
        generation=generation,
        turn_id=turn_id,
        attachment_id=attachment_id,
    )
    return True


def audit_staff_list(*, request: Any, action: AuditAction, seen: list[tuple[Any, Any, str]]) -> int:
    """Record that the request's (staff) user saw other users' sessions in a list that shows
    their content (the dashboard's turns, the inbox's requests): ``seen`` is (session id, owner
    id, turn id) per row shown. One row per session not their own, with the turns shown in
    ``detail``; a session already recorded for this reader and action in the last
    ``LIST_QUIET_SECONDS`` is not recorded again (the dashboard re-reads itself every few
    seconds). Returns how many rows were written."""
    user = getattr(request, "user", None)
    actor_id, actor = _actor(user)
    sessions: dict[Any, tuple[Any, list[str]]] = {}
    for session_id, owner_id, turn_id in seen:
        if session_id is None or (owner_id is not None and str(owner_id) == actor_id):
            continue
        owner, turns = sessions.setdefault(session_id, (owner_id, []))
        if turn_id and turn_id not in turns:
            turns.append(str(turn_id))
    if not sessions:
        return 0
    since = timezone.now() - timedelta(seconds=LIST_QUIET_SECONDS)
    recorded = set(
        m.AuditEvent.objects.filter(
            session_id__in=list(sessions), at__gte=since, action=action, actor_id=actor_id
        ).values_list("session_id", flat=True)
    )
    rows = [
        m.AuditEvent(
            action=action,
            actor_id=actor_id,
            actor=actor,
            subject=subject_of(owner),
            session_id=session_id,
            remote_addr=client_addr(request),
            detail={"turns": turns[:20]},
        )
        for session_id, (owner, turns) in sessions.items()
        if session_id not in recorded
    ]
    m.AuditEvent.objects.bulk_create(rows)
    return len(rows)


def audit_purge(*, now: datetime | None = None, days: float | None = None) -> int:
    """Delete the audit rows older than ``days`` (default ``JUNE_AUDIT_RETENTION_DAYS``; 0 keeps
    every row), in batches; records the purge itself. Returns how many rows went."""
    days = settings.JUNE_AUDIT_RETENTION_DAYS if days is None else days
    if not days or days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    deleted = 0
    while True:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT set_config('june.audit_purge_before', %s, true)", [cutoff.isoformat()])
            batch = list(
                m.AuditEvent.objects.filter(at__lt=cutoff).order_by("at").values_list("pk", flat=True)[:PURGE_BATCH]
            )
            if batch:
                deleted += m.AuditEvent.objects.filter(pk__in=batch).delete()[0]
        if len(batch) < PURGE_BATCH:
            break
    if deleted:
        audit_record(action=AuditAction.AUDIT_PURGE, detail={"deleted": deleted, "before": cutoff.isoformat()})
    return deleted
