"""The privacy sweep: retention (each agent's ``retention``, over ``JUNE_RETENTION``) and the
audit log's own (``audit.audit_purge``). A django-q2 schedule runs ``retention_sweep`` every
``JUNE_RETENTION_MINUTES`` (``workers.tasks.privacy_sweep``); ``manage.py june retention
[--dry-run]`` runs it by hand.

Per agent and per pass, at most ``JUNE_RETENTION_BATCH`` sessions and as many archived
generations go, oldest first, each deleted in short chunks (``erasure``): a pass never holds a
lock a turn needs, and a backlog is worked off over several passes. A session under legal hold,
or with an unfinished turn, is never touched. A dry run deletes nothing and says what would go.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, F, Max, OuterRef, Q
from django.utils import timezone

from agents_app.models import Attachment
from agents_app.runtime.keeping import effective_retention, retention_config
from sessions_app import audit, erasure, wiring
from sessions_app import models as m


def policies() -> dict[str, dict[str, float | None]]:
    """Each agent's effective retention (only the agents with a rule)."""
    site = retention_config(settings.JUNE_RETENTION, owner="JUNE_RETENTION")
    agents = wiring.agents()
    names = set(agents) | set(m.Session.objects.values_list("agent", flat=True).distinct())
    out = {}
    for name in sorted(names):
        rules = effective_retention(site, agents[name].retention if name in agents else {})
        if any(v is not None for v in rules.values()):
            out[name] = rules
    return out


def _before(now: datetime, days: float | None) -> datetime | None:
    return None if days is None else now - timedelta(days=days)


def _expired_sessions(agent: str, cutoff: datetime, limit: int) -> list[int]:
    busy = m.Turn.objects.filter(session_id=OuterRef("pk"), status__in=m.CHAIN_BLOCKING)
    return list(
        m.Session.objects.filter(agent=agent, updated_at__lt=cutoff, legal_hold=False)
        .exclude(key__startswith=erasure.DELETING)
        .exclude(Exists(busy))
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )


def _expired_generations(agent: str, cutoff: datetime, limit: int) -> list[tuple[int, int]]:
    """(session, generation) of archived generations whose last turn is older than ``cutoff``."""
    rows = (
        m.Turn.objects.filter(session__agent=agent, session__legal_hold=False)
        .exclude(generation=F("session__generation"))
        .values("session_id", "generation")
        .annotate(last=Max("updated_at"))
        .filter(last__lt=cutoff)
        .order_by("last")[:limit]
    )
    return [(r["session_id"], r["generation"]) for r in rows]


def _expired_attachments(agent: str, cutoff: datetime, limit: int) -> list[str]:
    held = m.Session.objects.filter(agent=agent, legal_hold=True).values_list("key", flat=True)
    return list(
        Attachment.objects.filter(agent=agent, created_at__lt=cutoff)
        .exclude(session_key__in=held)
        .order_by("created_at")
        .values_list("pk", flat=True)[:limit]
    )


def retention_sweep(*, now: datetime | None = None, dry_run: bool = False, batch: int | None = None) -> dict[str, Any]:
    """One pass. Returns ``{"dry_run", "would_delete" | "deleted": {kind: n}, "agents": {...}}``:
    what went (or would), in total and per agent."""
    now = now or timezone.now()
    batch = settings.JUNE_RETENTION_BATCH if batch is None else batch
    total: Counter = Counter()
    per_agent: dict[str, dict[str, int]] = {}
    if not dry_run:
        erasure.sessions_resume_deleting(counts=total)
    for agent, rules in policies().items():
        counts: Counter = Counter()
        if (cutoff := _before(now, rules["sessions_days"])) is not None:
            for session_id in _expired_sessions(agent, cutoff, batch):
                if dry_run:
                    counts["sessions"] += 1
                else:
                    erasure.session_delete(
                        session_id, counts=counts, only_if=Q(updated_at__lt=cutoff, legal_hold=False)
                    )
        if (cutoff := _before(now, rules["archived_days"])) is not None:
            for session_id, generation in _expired_generations(agent, cutoff, batch):
                if dry_run:
                    counts["generations"] += 1
                else:
                    erasure.generation_delete(session_id, generation, counts=counts)
        if (cutoff := _before(now, rules["attachments_days"])) is not None:
            ids = _expired_attachments(agent, cutoff, batch)
            if dry_run:
                counts["attachments"] += len(ids)
            else:
                counts["attachments"] += Attachment.objects.filter(pk__in=ids).delete()[0]
        kept = {k: v for k, v in sorted(counts.items()) if v}
        if kept:
            per_agent[agent] = kept
        total.update(counts)
    report = {k: v for k, v in sorted(total.items()) if v}
    if dry_run:
        return {"dry_run": True, "would_delete": report, "agents": per_agent}
    if report:
        audit.audit_record(action=m.AuditAction.RETENTION, detail={"deleted": report, "agents": per_agent})
    purged = audit.audit_purge(now=now)
    return {"dry_run": False, "deleted": report, "agents": per_agent, "audit_rows_purged": purged}
