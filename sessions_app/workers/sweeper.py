"""The lease sweeper (``workers.watchdog`` runs it inside every worker process).

The sweeper is the only thing that notices a dead worker: its turns' leases expire, and
``sweep_expired`` finds them — from each worker's watchdog when the earliest lease it read runs
out (``sweep``: at most every ``JUNE_SWEEP_SECONDS``, at least once a lease), and every minute
from the django-q2 schedule (the backstop when no watchdog runs) — and either fails a turn
whose retry budget is spent or marks it for re-delivery (``swept:`` + its last owner, the lease
expired now), which any worker's runner then takes from the table (``workers.taker``) and claims.
A queued turn needs no sweeper: its row is its delivery (a wake-up is lost only with a listener's
connection, after which its taker looks at once; a take whose runner died runs out after
``JUNE_REQUEUE_AFTER``, and a quiet taker looks then).

Every action of the sweeper is a conditional UPDATE or a fenced checkpoint, so sweepers running
in many processes at once act at most once per expiry; a duplicate delivery is harmless (its
claim finds the lease taken and returns).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agents_app.runtime import events as ev
from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.recovery import RecoveryState, classify_submission_state
from agents_app.runtime.seams import Phase, TurnStatus
from sessions_app import models as m
from sessions_app import wiring
from sessions_app.outbox.queue import enqueue_turn
from sessions_app.services import publish_on_commit

log = logging.getLogger(__name__)

#: the sweep's read (``expired``)
EXPIRED = (
    f"SELECT id, attempt_id, lease_owner, lease_expires_at FROM {m.Turn._meta.db_table}"
    " WHERE status = %s AND lease_expires_at < %s ORDER BY lease_expires_at LIMIT %s"
)
#: the watchdog's read (``look``): the sweep's, and the earliest lease of a running turn that has not
#: run out yet (the row whose id is NULL)
LOOK = (
    f"SELECT * FROM ({EXPIRED}) AS e UNION ALL SELECT NULL, NULL, NULL, MIN(lease_expires_at)"
    f" FROM {m.Turn._meta.db_table} WHERE status = %s AND lease_expires_at >= %s"
)
#: lease_owner prefix marking a turn the sweeper has re-enqueued (so other sweepers skip it)
SWEPT = "swept:"
#: the most expired turns one sweep reads
LIMIT = 200
#: what ``expired`` reads: id, attempt_id, lease_owner, lease_expires_at
Rows = list[tuple[str, str | None, str | None, float]]
BUDGET_REASON = "retry budget exhausted"


# -- the sweeper ------------------------------------------------------------------------------------


def _tools_of(agent_name: str) -> dict[str, tuple[bool, str]]:
    try:
        agent = wiring.agent(agent_name)
    except Exception:  # an agent that is gone: its tools count as sync (re-run, never reported)
        return {}
    return {name: (t.is_async, t.on_interrupt) for name, t in agent.tools.items()}


def _classify(turn_id: str, now: float) -> tuple[RecoveryState, Any]:
    state = wiring.store().load_sync(turn_id)
    recovery = classify_submission_state(
        state.turn,
        state.transcript,
        now,
        tools=_tools_of(state.turn.session.agent),
        max_attempts=settings.JUNE_MAX_ATTEMPTS,
    )
    return recovery, state.turn


def expired(now: float, limit: int = LIMIT) -> Rows:
    """Running turns whose lease ran out before ``now``, the longest expired first: the running
    turns by the ``turn_status_created`` index, their expiry a filter (no index holds it: the
    lease's writes stay heap-only updates). Written as SQL: every worker's watchdog runs it (in
    ``look``) and almost always finds nothing, and the ORM's compile of it was most of the
    sweep's CPU."""
    with connection.cursor() as cursor:
        cursor.execute(EXPIRED, [TurnStatus.RUNNING.value, now, limit])
        return cursor.fetchall()


def look(now: float, limit: int = LIMIT) -> tuple[Rows, float | None]:
    """``expired``, and in the same statement the earliest expiry of a running turn's lease that
    has not run out at ``now`` (None: no such turn)."""
    running = TurnStatus.RUNNING.value
    with connection.cursor() as cursor:
        cursor.execute(LOOK, [running, now, limit, running, now])
        rows = cursor.fetchall()
    return [row for row in rows if row[0] is not None], next((row[3] for row in rows if row[0] is None), None)


def horizon() -> float:
    """How long no lease can run out unseen after a look that found none: a lease claimed or
    renewed later is ``JUNE_LEASE_SECONDS`` long, a re-delivery's take mark on a running turn
    ``JUNE_REQUEUE_AFTER``, and a sweep's own re-delivery mark is looked at again after
    ``JUNE_REDELIVER_AFTER``."""
    return min(settings.JUNE_LEASE_SECONDS, settings.JUNE_REQUEUE_AFTER, settings.JUNE_REDELIVER_AFTER)


def sweep_expired(*, now: float | None = None, redeliver_after: float | None = None) -> dict[str, int]:
    """Turns that are running on an expired lease: re-enqueue them, or fail them when their
    retry budget is spent. Returns counts by action (for logs and tests)."""
    now = time.time() if now is None else now
    return _act(expired(now), now, redeliver_after)[0]


def sweep(*, now: float | None = None) -> tuple[dict[str, int], float]:
    """The watchdog's pass: ``sweep_expired``, and when the next one is due (wall clock): when the
    earliest lease read runs out, a skipped re-delivery is due again, or ``horizon`` from now,
    whichever comes first (now when a turn was left as it was, or the read was full)."""
    now = time.time() if now is None else now
    rows, upcoming = look(now)
    counts, due = _act(rows, now, None)
    due = min(due, now + horizon())
    return counts, due if upcoming is None else min(due, upcoming)


def _act(rows: Rows, now: float, redeliver_after: float | None) -> tuple[dict[str, int], float]:
    redeliver_after = settings.JUNE_REDELIVER_AFTER if redeliver_after is None else redeliver_after
    counts = {"redelivered": 0, "failed": 0}
    due = now if len(rows) >= LIMIT else float("inf")  # a full read: more to look at now
    for turn_id, attempt_id, owner, expires in rows:
        if owner and owner.startswith(SWEPT) and expires is not None and expires > now - redeliver_after:
            due = min(due, expires + redeliver_after)
            continue  # re-enqueued a moment ago: give a worker time to claim it
        try:
            action = _recover(turn_id, attempt_id, owner, expires, now)
        except Exception:
            log.exception("sweeper: turn %s", turn_id)
            action = None
        if action:
            counts[action] += 1
        if action != "failed":  # left as it was (look again), or re-delivered (looked at again later)
            due = min(due, now + redeliver_after if action else now)
    return counts, due


def _recover(turn_id: str, attempt_id: str | None, owner: str | None, expires: float, now: float) -> str | None:
    recovery, rec = _classify(turn_id, now)
    if recovery in (RecoveryState.FINISHED, RecoveryState.PARKED, RecoveryState.LEASE_LIVE):
        return None
    if recovery == RecoveryState.BUDGET_EXHAUSTED:
        return "failed" if fail_exhausted(turn_id, attempt_id=attempt_id, attempts=rec.attempts) else None
    with transaction.atomic():
        # one sweeper wins this expiry: the row must still be exactly as it was read
        marked = m.Turn.objects.filter(
            pk=turn_id, status=TurnStatus.RUNNING, attempt_id=attempt_id, lease_expires_at=expires
        ).update(lease_owner=(SWEPT + (owner or "").removeprefix(SWEPT))[:200], lease_expires_at=now)
        if not marked:
            return None
        enqueue_turn(turn_id)
    log.warning("sweeper: turn %s lease expired (%s, %s); re-enqueued", turn_id, owner, recovery)
    return "redelivered"


def fail_exhausted(turn_id: str, *, attempt_id: str | None, attempts: int) -> bool:
    """Fail a turn whose retry budget is spent (fenced on the attempt that was read), publish
    ``turn.failed`` and hand the session's chain to its next queued turn."""
    store = wiring.store()
    message = f"{BUDGET_REASON} after {attempts} attempts"

    def work(tx: Any) -> None:
        tx.emit(ev.TurnFailed(turn_id, error=message))
        tx.journal(Phase.COMMITTED)
        tx.settle(TurnStatus.FAILED, error={"message": message, "reason": "budget_exhausted"})

    try:
        with transaction.atomic():
            rec = store.get_turn_sync(turn_id)
            if rec.status not in (TurnStatus.RUNNING, TurnStatus.QUEUED) or rec.attempt_id != attempt_id:
                return False
            commit = store.atomic_sync(turn_id, attempt_id, work)
            publish_on_commit(rec.session, commit.events)
            nxt = store.next_queued_sync(rec.session)
            if nxt:
                enqueue_turn(nxt)
    except StaleAttemptError:
        return False  # a worker claimed it meanwhile
    log.warning("sweeper: turn %s failed: %s", turn_id, message)
    return True


__all__ = ["sweep", "sweep_expired", "fail_exhausted"]
