"""The lease sweeper and the watchdog thread that runs it inside every worker process.

The sweeper is the only thing that notices a dead worker: django-q2's ORM broker would hand the
killed task out again only after ``retry`` seconds (half an hour here), so expired leases are
found and re-enqueued by ``sweep_expired`` — every ``JUNE_SWEEP_SECONDS`` from each worker's
watchdog, and every minute from the django-q2 schedule (the backstop when no watchdog runs).

Every action of the sweeper is a conditional UPDATE or a fenced checkpoint, so sweepers running
in many processes at once act at most once per expiry; a duplicate ``run_turn`` is harmless (its
claim finds the lease taken and returns).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import BadSignature, SignedPackage

from agents_app.runtime import events as ev
from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.recovery import RecoveryState, classify_submission_state
from agents_app.runtime.seams import Phase, TurnStatus

from sessions_app import models as m
from sessions_app import wiring
from sessions_app.outbox.queue import RUN_TURN, enqueue_turn
from sessions_app.services import publish_on_commit

log = logging.getLogger(__name__)

#: lease_owner prefix marking a turn the sweeper has re-enqueued (so other sweepers skip it)
SWEPT = "swept:"
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
        state.turn, state.transcript, now,
        tools=_tools_of(state.turn.session.agent), max_attempts=settings.JUNE_MAX_ATTEMPTS,
    )
    return recovery, state.turn


def sweep_expired(*, now: float | None = None, redeliver_after: float | None = None) -> dict[str, int]:
    """Turns that are running on an expired lease: re-enqueue them, or fail them when their
    retry budget is spent. Returns counts by action (for logs and tests)."""
    now = time.time() if now is None else now
    redeliver_after = settings.JUNE_REDELIVER_AFTER if redeliver_after is None else redeliver_after
    counts = {"redelivered": 0, "failed": 0}
    candidates = list(
        m.Turn.objects.filter(status=TurnStatus.RUNNING, lease_expires_at__lt=now)
        .values_list("id", "attempt_id", "lease_owner", "lease_expires_at")[:200]
    )
    for turn_id, attempt_id, owner, expires in candidates:
        if owner and owner.startswith(SWEPT) and expires is not None and expires > now - redeliver_after:
            continue  # re-enqueued a moment ago: give a worker time to claim it
        try:
            action = _recover(turn_id, attempt_id, owner, expires, now)
        except Exception:
            log.exception("sweeper: turn %s", turn_id)
            continue
        if action:
            counts[action] += 1
    return counts


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


def pending_turn_ids() -> set[str]:
    """Turn ids with a ``run_turn`` task waiting in the ORM queue (not yet taken by a cluster)."""
    ids: set[str] = set()
    for payload in OrmQ.objects.filter(key=Conf.CLUSTER_NAME, lock__lte=timezone.now()).values_list("payload", flat=True):
        try:
            task = SignedPackage.loads(payload)
        except (BadSignature, TypeError, ValueError):
            continue
        if task.get("func") == RUN_TURN and task.get("args"):
            ids.add(str(task["args"][0]))
    return ids


def sweep_queued(*, now: float | None = None, requeue_after: float | None = None) -> int:
    """Queued turns first in their session's chain, older than ``requeue_after`` seconds, with no
    task waiting in the queue for them: their enqueue was lost (e.g. a cluster died holding the
    task). Re-enqueue them. Run by the scheduled sweep, not the watchdog (at most one duplicate
    a tick)."""
    now_dt = timezone.now()
    requeue_after = settings.JUNE_REQUEUE_AFTER if requeue_after is None else requeue_after
    old = m.Turn.objects.filter(status=TurnStatus.QUEUED, created_at__lt=now_dt - timedelta(seconds=requeue_after))
    heads = []
    for turn in old.select_related("session").order_by("session_id", "order")[:500]:
        blocking = m.Turn.objects.filter(
            session_id=turn.session_id, order__lt=turn.order,
            status__in=(TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.SUSPENDED),
        ).exists()
        if not blocking:
            heads.append(turn)
    if not heads:
        return 0
    waiting = pending_turn_ids()
    count = 0
    for turn in heads:
        if turn.id in waiting:
            continue
        recovery, rec = _classify(turn.id, time.time() if now is None else now)
        if recovery == RecoveryState.BUDGET_EXHAUSTED:
            fail_exhausted(turn.id, attempt_id=rec.attempt_id, attempts=rec.attempts)
            continue
        with transaction.atomic():
            enqueue_turn(turn.id)
        count += 1
        log.warning("sweeper: queued turn %s had no task waiting; re-enqueued", turn.id)
    return count


# -- the watchdog: the sweeper inside every worker process -----------------------------------------

_watchdog: threading.Thread | None = None


def start_watchdog(period: float | None = None) -> threading.Thread | None:
    """Start (once per process) a daemon thread running ``sweep_expired`` every ``period``
    seconds, beginning with a pass at start (the recovery pass of a fresh cluster)."""
    global _watchdog
    period = settings.JUNE_SWEEP_SECONDS if period is None else period
    if period <= 0 or (_watchdog is not None and _watchdog.is_alive()):
        return _watchdog
    _watchdog = threading.Thread(target=_watch, args=(period,), name="june-sweeper", daemon=True)
    _watchdog.start()
    return _watchdog


def _watch(period: float) -> None:
    time.sleep(random.uniform(0, period / 2))  # spread the workers of a cluster apart
    while True:
        try:
            # the thread's connection is kept between passes (close_old_connections, with
            # CONN_MAX_AGE 0, reconnected every period in every worker); a failed pass drops it
            counts = sweep_expired()
            if any(counts.values()):
                log.info("sweeper: %s", counts)
        except Exception:  # a database blip: try again next period
            log.exception("sweeper pass failed")
            connections.close_all()
        time.sleep(period * random.uniform(0.8, 1.2))


__all__ = ["pending_turn_ids", "sweep_expired", "sweep_queued", "fail_exhausted", "start_watchdog"]
