"""The lease: claim, heartbeat, release — each one conditional UPDATE (the same on SQLite and
PostgreSQL; ``select_for_update`` is a no-op on SQLite)."""

from __future__ import annotations

from django.db import connection

from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.seams import SessionStatus, TurnRecord, TurnStatus
from sessions_app import models as m
from sessions_app.store.checkpoint import CHAIN_BLOCKING
from sessions_app.store.records import record_of, turn_row

#: runnable, lease free or expired, first of its session's chain
CLAIM = f"""
UPDATE sessions_app_turn SET status = %s, lease_owner = %s, lease_expires_at = %s,
       attempt_id = %s, attempts = attempts + 1, revision = revision + 1
WHERE id = %s
  AND (status = %s OR (status = %s AND (lease_expires_at IS NULL OR lease_expires_at < %s)))
  AND NOT EXISTS (
    SELECT 1 FROM sessions_app_turn AS t2
    WHERE t2.session_id = sessions_app_turn.session_id
      AND t2.status IN ({", ".join(["%s"] * len(CHAIN_BLOCKING))})
      AND t2."order" < sessions_app_turn."order"
  )
"""
HEARTBEAT = ("UPDATE sessions_app_turn SET lease_expires_at = %s WHERE id = %s AND attempt_id = %s "
             "AND status = %s RETURNING cancel_reason")


def claim(turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float) -> TurnRecord | None:
    with connection.cursor() as cur:
        cur.execute(CLAIM, [TurnStatus.RUNNING, owner, now + lease_seconds, attempt_id, turn_id,
                            TurnStatus.QUEUED, TurnStatus.RUNNING, now, *CHAIN_BLOCKING])
        claimed = cur.rowcount == 1
    if not claimed:
        return None
    turn = turn_row(turn_id)
    if turn.session.status != SessionStatus.RUNNING:
        m.Session.objects.filter(pk=turn.session_id).update(status=SessionStatus.RUNNING)
    return record_of(turn)


def heartbeat(turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
    """Extend the lease; the cancel reason on the row. StaleAttemptError when it was lost."""
    with connection.cursor() as cur:
        cur.execute(HEARTBEAT, [now + lease_seconds, turn_id, attempt_id, TurnStatus.RUNNING])
        row = cur.fetchone()
    if row is None:
        raise StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} lost the lease")
    return row[0]


def release(turn_id: str, *, attempt_id: str) -> None:
    m.Turn.objects.filter(pk=turn_id, attempt_id=attempt_id, status=TurnStatus.RUNNING).update(
        status=TurnStatus.QUEUED, lease_owner=None, lease_expires_at=None
    )
