"""The lease sweeper (``workers.watchdog`` runs it inside every worker process).

The sweeper is the only thing that notices a dead worker: django-q2's ORM broker would hand the
killed task out again only after ``retry`` seconds (half an hour here), so expired leases are
found and re-enqueued by ``sweep_expired``, and a queued turn whose task a dead cluster took
(or whose enqueue was lost) by ``sweep_queued`` — both every ``JUNE_SWEEP_SECONDS`` from each
worker's watchdog, and every minute from the django-q2 schedule (the backstop when no watchdog
runs).

Every action of the sweeper is a conditional UPDATE or a fenced checkpoint, so sweepers running
in many processes at once act at most once per expiry, and re-enqueue a queued turn at most once
per ``JUNE_REQUEUE_AFTER``; a duplicate ``run_turn`` is harmless (its claim finds the lease taken
and returns).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import BadSignature, SignedPackage

from agents_app.runtime import events as ev
from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.executor import default_owner
from agents_app.runtime.recovery import RecoveryState, classify_submission_state
from agents_app.runtime.seams import Phase, TurnStatus
from sessions_app import models as m
from sessions_app import wiring
from sessions_app.outbox.queue import RUN_TURN, enqueue_turn
from sessions_app.services import publish_on_commit
from sessions_app.store.lease import chain_heads

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
        state.turn,
        state.transcript,
        now,
        tools=_tools_of(state.turn.session.agent),
        max_attempts=settings.JUNE_MAX_ATTEMPTS,
    )
    return recovery, state.turn


def sweep_expired(*, now: float | None = None, redeliver_after: float | None = None) -> dict[str, int]:
    """Turns that are running on an expired lease: re-enqueue them, or fail them when their
    retry budget is spent. Returns counts by action (for logs and tests)."""
    now = time.time() if now is None else now
    redeliver_after = settings.JUNE_REDELIVER_AFTER if redeliver_after is None else redeliver_after
    counts = {"redelivered": 0, "failed": 0}
    candidates = list(
        m.Turn.objects.filter(status=TurnStatus.RUNNING, lease_expires_at__lt=now).values_list(
            "id", "attempt_id", "lease_owner", "lease_expires_at"
        )[:200]
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


# -- queued turns whose task was taken and never claimed, or lost -----------------------------------
#
# A cluster takes (locks) a task before one of its workers runs it: the pusher locks a row for
# ``Conf.RETRY`` seconds, then hands it to a worker through the cluster's own queue, which holds up
# to ``queue_limit`` tasks more while every worker is busy. Killed in between, the cluster leaves
# the row locked for ``retry`` (half an hour) and the turn queued with no lease, which
# ``sweep_expired`` never looks at. ``sweep_queued`` gives such a turn a new task.

#: lease_owner prefix of a queued turn re-enqueued by ``sweep_queued`` (its lease_expires_at: when)
REQUEUED = "requeued:"

#: ormq id -> the turn id of its ``run_turn`` task (None: another task, or unreadable). A task row
#: never changes its payload, so each is decoded once per process, not at every pass; entries of
#: rows gone from the queue are dropped at the next read.
_decoded: dict[int, str | None] = {}
_decoded_lock = threading.Lock()


def _turn_of(payload: str) -> str | None:
    try:
        task = SignedPackage.loads(payload)
    except (BadSignature, TypeError, ValueError):
        return None
    if task.get("func") == RUN_TURN and task.get("args"):
        return str(task["args"][0])
    return None


def queued_tasks() -> dict[str, list[datetime]]:
    """Turn id -> the lock times of its ``run_turn`` tasks in the ORM queue. A lock in the past:
    the task waits for a cluster; in the future: a cluster took it at ``lock - Conf.RETRY``."""
    rows = list(OrmQ.objects.filter(key=Conf.CLUSTER_NAME).values_list("id", "lock"))
    with _decoded_lock:
        unknown = [pk for pk, _ in rows if pk not in _decoded]
        if unknown:
            for pk, payload in OrmQ.objects.filter(pk__in=unknown).values_list("id", "payload"):
                _decoded[pk] = _turn_of(payload)
        present = {pk for pk, _ in rows}
        for pk in [pk for pk in _decoded if pk not in present]:
            del _decoded[pk]
        turns = {pk: _decoded.get(pk) for pk in present}
    tasks: dict[str, list[datetime]] = {}
    for pk, lock in rows:
        if turns[pk] is not None:
            tasks.setdefault(turns[pk], []).append(lock)
    return tasks


def pending_turn_ids() -> set[str]:
    """Turn ids with a ``run_turn`` task waiting in the ORM queue (not yet taken by a cluster)."""
    now = timezone.now()
    return {turn_id for turn_id, locks in queued_tasks().items() if any(lock <= now for lock in locks)}


def _unclaimed(now: float, window: float) -> list[tuple[str, int]]:
    """(id, attempts) of queued turns created ``window`` seconds ago or more and not re-enqueued
    by a sweeper within the window: the only turns that can have been left unclaimed that long.
    Usually none (a queued turn is claimed within milliseconds of its task), so an idle watchdog
    pass costs this one query (by the status index); in a backlog, the oldest first."""
    since = now - window
    unclaimed = (
        m.Turn.objects.filter(status=TurnStatus.QUEUED, created_at__lte=_datetime(since))
        .exclude(lease_owner__startswith=REQUEUED, lease_expires_at__gt=since)
        .order_by("created_at")
        .values_list("id", "attempts")
    )
    return list(unclaimed[:500])


def requeue_once(turn_id: str, *, now: float, window: float) -> bool:
    """Re-enqueue a queued turn unless a sweeper did within ``window`` seconds: of all the
    watchdogs and schedules of all clusters, one wins per window. The compare-and-set is one
    conditional UPDATE of the turn row: it must still be queued (a claim makes it running and
    writes its own lease over these columns) and not marked re-enqueued within the window; it
    marks it so in the lease columns, which a queued turn does not use (the claim takes a queued
    turn whatever they hold; the fence and the heartbeat go by ``attempt_id``, which stays as it
    is, as do ``revision`` and ``attempts``). The task is enqueued at the mark's commit."""
    with transaction.atomic():
        marked = (
            m.Turn.objects.filter(pk=turn_id, status=TurnStatus.QUEUED)
            .exclude(lease_owner__startswith=REQUEUED, lease_expires_at__gt=now - window)
            .update(lease_owner=(REQUEUED + default_owner())[:200], lease_expires_at=now)
        )
        if marked:
            enqueue_turn(turn_id)
    return marked == 1


def sweep_queued(
    *, now: float | None = None, requeue_after: float | None = None, lost_seen: set[str] | None = None
) -> int:
    """Queued turns first in their session's chain that no worker claimed though nothing waits to
    run them: re-enqueue them. Returns how many were re-enqueued.

    A turn is re-enqueued when none of its tasks waits unlocked in the queue (a cluster would take
    it), none was taken within the last ``requeue_after`` seconds (``JUNE_REQUEUE_AFTER``; a cluster
    that took it a moment ago is about to claim it) and no sweeper re-enqueued it within as long
    (``requeue_once``): its task was taken by a cluster that died (or is busy past the window with
    the task in its own queue; then a free cluster runs the turn and the busy one's claim finds it
    taken), or its enqueue was lost.

    ``lost_seen``: the watchdog's memory between its passes. A turn with no task at all is then
    re-enqueued only if the pass before saw it so too, since a turn just handed over or woken is
    queued a moment before its enqueue lands (both are the same worker's, one after the other);
    the set is replaced by this pass's. Without it (the schedule, once a minute) such a turn is
    re-enqueued at once."""
    now = time.time() if now is None else now
    window = settings.JUNE_REQUEUE_AFTER if requeue_after is None else requeue_after
    candidates = _unclaimed(now, window)
    lost: set[str] = set()
    count = 0
    if candidates:
        tasks = queued_tasks()
        now_dt = _datetime(now)
        # a task's lock is its take time + retry: later than this, it was taken within the window
        taken_since = _datetime(now - window) + timedelta(seconds=Conf.RETRY)
        stuck = [
            (turn_id, attempts, tasks.get(turn_id, []))
            for turn_id, attempts in candidates
            if not any(lock <= now_dt or lock > taken_since for lock in tasks.get(turn_id, []))
        ]
        # a turn queued behind another of its session has no task: the chain's hand-off gives it one
        heads = chain_heads([turn_id for turn_id, _, _ in stuck])
        for turn_id, attempts, locks in stuck:
            if turn_id not in heads:
                continue
            if not locks:
                lost.add(turn_id)
                if lost_seen is not None and turn_id not in lost_seen:
                    continue
            if _requeue(turn_id, now, window, taken=bool(locks), attempts=attempts):
                count += 1
    if lost_seen is not None:
        lost_seen.clear()
        lost_seen.update(lost)
    return count


def _requeue(turn_id: str, now: float, window: float, *, taken: bool, attempts: int) -> bool:
    if attempts >= settings.JUNE_MAX_ATTEMPTS:  # cheap first look; the classifier decides
        recovery, rec = _classify(turn_id, now)
        if recovery == RecoveryState.BUDGET_EXHAUSTED:
            fail_exhausted(turn_id, attempt_id=rec.attempt_id, attempts=rec.attempts)
            return False
    if not requeue_once(turn_id, now=now, window=window):
        return False  # claimed meanwhile, or another sweeper re-enqueued it within the window
    log.warning(
        "sweeper: queued turn %s %s; re-enqueued",
        turn_id,
        f"was taken by a cluster and not claimed within {window:g}s" if taken else "had no task",
    )
    return True


def _datetime(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


__all__ = ["requeue_once", "pending_turn_ids", "queued_tasks", "sweep_expired", "sweep_queued", "fail_exhausted"]
