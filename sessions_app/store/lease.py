"""The lease: claim, heartbeat, release — each one conditional UPDATE (the same on SQLite and
PostgreSQL; ``select_for_update`` is a no-op on SQLite)."""

from __future__ import annotations

import time
from typing import Any, Generator

from django.conf import settings
from django.db import connection

from agents_app.runtime.errors import StaleAttemptError
from agents_app.runtime.seams import SessionStatus, TurnRecord, TurnStatus
from sessions_app.store import wire
from sessions_app.store.checkpoint import IN_CHAIN, plain_now
from sessions_app.store.rows import record_of, turn_row

#: the mark a worker's runner leaves on a turn it took from the table and is about to claim
#: (``workers.taker``): ``lease_owner`` = this prefix + the runner's ``host:pid``,
#: ``lease_expires_at`` = when another runner may take it again (the taker died before its claim)
TAKEN = "taken:"

#: runnable, lease free or expired, and the head of its session's chain. A running turn carrying a
#: take's mark (a re-delivery the sweeper marked, then a runner took) is claimable whatever its
#: mark's expiry: the mark is no lease, only a runner's note that it is about to claim. The head is a subquery
#: with its LIMIT, read from the ``turn_chain`` index whatever the planner believes of the table's
#: size. As ``NOT EXISTS`` (an earlier turn of the chain), PostgreSQL made it an anti-join, and a
#: generic plan made while the turns were few and never analyzed (a new database; autovacuum off
#: or not yet run) scanned every turn, for as long as the connection lived (one scan a turn in
#: bench/bench_soak.py; the hand-off made another). (Two unfinished turns of one order, which the
#: session's counter never makes, would claim one, not both.)
CLAIM = f"""
UPDATE sessions_app_turn SET status = %s, lease_owner = %s, lease_expires_at = %s,
       attempt_id = %s, attempts = attempts + 1, revision = revision + 1,
       started_at = COALESCE(started_at, %s)
WHERE id = %s
  AND (status = %s OR (status = %s AND (lease_expires_at IS NULL OR lease_expires_at < %s
                                         OR substr(lease_owner, 1, 6) = 'taken:')))
  AND id = (
    SELECT h.id FROM sessions_app_turn AS h
    WHERE h.session_id = sessions_app_turn.session_id AND h.status {IN_CHAIN}
    ORDER BY h."order" LIMIT 1
  )
"""
#: a released turn is queued again with its releasing runner's take mark (``TAKEN`` + its owner)
#: for ``RETRY_HOLD`` seconds: that runner claims it again after its backoff, and no other runner
#: takes it sooner (the backoff is the executor's ``retry_delay``, a few seconds at most); a runner
#: that dies meanwhile leaves a mark that runs out as any take's does
RELEASE = (
    "UPDATE sessions_app_turn SET status = %s, lease_owner = substr(%s || COALESCE(lease_owner, ''), 1, 200), "
    "lease_expires_at = %s WHERE id = %s AND attempt_id = %s AND status = %s"
)
RETRY_HOLD = 10.0
#: a claimed turn's session is running (``updated_at`` stays: it stamps what the session list orders by)
SESSION_RUNNING = "UPDATE sessions_app_session SET status = %s WHERE id = %s"
assert len(TAKEN) == 6 and f"'{TAKEN}'" in CLAIM

HEARTBEAT = (
    "UPDATE sessions_app_turn SET lease_expires_at = %s WHERE id = %s AND attempt_id = %s "
    "AND status = %s RETURNING cancel_reason"
)
#: PostgreSQL's heartbeat commits without waiting for the WAL flush (``synchronous_commit`` off
#: for its own transaction, as the claim's and the provider_started journal's): a beat lost with a
#: crash of the server leaves the lease at its expiry before the beat, two thirds of a lease or
#: more after it, and the runner's next beat extends it again; a lease that ran out meanwhile is
#: taken over as any expired lease is, and the old attempt's units are refused by their fences. It
#: writes a new version of the turn's row every third of a lease for as long as the turn runs (a
#: model call of a minute: nine), each of which waited for a flush of its own
HEARTBEAT_PG = wire.numbered(f"{HEARTBEAT}, set_config('synchronous_commit', 'off', true)")


def claim(turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float) -> TurnRecord | None:
    with connection.cursor() as cur:
        cur.execute(CLAIM, claim_params(turn_id, owner, attempt_id, now, lease_seconds))
        claimed = cur.rowcount == 1
    if not claimed:
        return None
    turn = turn_row(turn_id)
    if turn.session.status != SessionStatus.RUNNING:
        with connection.cursor() as cur:
            cur.execute(SESSION_RUNNING, [str(SessionStatus.RUNNING), turn.session_id])
    return record_of(turn)


def claim_params(turn_id: str, owner: str, attempt_id: str, now: float, lease_seconds: float) -> list:
    return [
        str(TurnStatus.RUNNING),
        owner,
        now + lease_seconds,
        attempt_id,
        plain_now(),  # started_at: the first claim's (a retry keeps it)
        turn_id,
        str(TurnStatus.QUEUED),
        str(TurnStatus.RUNNING),
        now,
    ]


def heartbeat(turn_id: str, *, attempt_id: str, now: float, lease_seconds: float, cur: Any = None) -> str | None:
    """Extend the lease; the cancel reason on the row. StaleAttemptError when it was lost.
    ``cur``: the store's own SQLite connection's (``lite``); else Django's connection."""
    if cur is None:
        with connection.cursor() as cur:
            return heartbeat(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds, cur=cur)
    cur.execute(HEARTBEAT, [now + lease_seconds, turn_id, attempt_id, str(TurnStatus.RUNNING)])
    row = cur.fetchone()
    if row is None:
        raise StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} lost the lease")
    return row[0]


def heartbeat_direct(raw: Any, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
    """PostgreSQL: ``heartbeat`` on the store's own connection (``direct``), one round trip, on
    the caller's thread. A sync tool's unit holds the thread that owns Django's connection for
    the tool's whole run; its turn's heartbeats do not wait for it here."""
    return wire.drive(raw, heartbeat_steps(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds))


def heartbeat_steps(
    turn_id: str, *, attempt_id: str, now: float, lease_seconds: float
) -> Generator[wire.Batch, Any, str | None]:
    """``heartbeat`` as one batch (``wire.drive``, ``pipes.Pipe.drive``)."""
    batch = wire.Batch(prepare=settings.JUNE_PREPARED_CHECKPOINTS)
    beat = batch.add(HEARTBEAT_PG, [now + lease_seconds, turn_id, attempt_id, TurnStatus.RUNNING])
    row = (yield batch)[beat]
    if not row.ntuples:
        raise StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} lost the lease")
    return wire.value(row, 0)


def release(turn_id: str, *, attempt_id: str, cur: Any = None) -> None:
    """Give the lease back (a retryable failure): the turn is queued again, held for its runner's
    retry (``RELEASE``)."""
    if cur is None:
        with connection.cursor() as cur:
            return release(turn_id, attempt_id=attempt_id, cur=cur)
    hold = time.time() + RETRY_HOLD
    cur.execute(RELEASE, [str(TurnStatus.QUEUED), TAKEN, hold, turn_id, attempt_id, str(TurnStatus.RUNNING)])
