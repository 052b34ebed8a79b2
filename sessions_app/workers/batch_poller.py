"""The Message Batches poller: sends the requests parked turns wrote (``store.batch_model``), collects
the answers, and queues the turns again (``SessionStore.resume_parked``). It rides every worker's
sweeper thread (``workers.watchdog``) every ``JUNE_BATCH_POLL_SECONDS``; a pass with nothing to do
is one indexed query.

One pass (``poll``), each part bounded by ``JUNE_BATCH_POLL_LIMIT`` rows (deliver first: the
answers a pass collects are delivered by the next):

- **send**: the ``intent`` rows are taken (a conditional update to ``submitting`` with this pass's
  token and time, committed), sent as ONE batch (``messages.batches.create``), and the batch's id
  is checkpointed on them (``submitted``). Pollers in several workers take disjoint rows.
- **recover**: rows left ``submitting`` longer than ``JUNE_BATCH_SUBMIT_GRACE`` belong to a pass
  that died (or lost its answer) between ``create`` and the checkpoint: the batches created since
  are their ``candidates`` (``recovering``); none, and the create never happened: sent again.
- **collect**: each batch that rows wait on is retrieved; an ended one's results (JSONL) are
  written to its rows (``done`` with the message, or ``failed``: errored, expired, canceled, or
  absent) in one transaction. A recovering row found in an ended candidate is done; one that no
  ended candidate holds, once all have ended, is sent again (``intent``): never twice, never lost.
- **cancel**: a sent batch whose every request's turn has ended meanwhile (cancelled, reset) is
  cancelled at the API (``messages.batches.cancel``), so nothing is processed (nor billed) for a
  turn nobody waits on; its rows are closed (``failed``, delivered). A batch that also holds a
  request of a turn still waiting runs on: the ended turn's answer is collected and dropped.
- **deliver**: each answered row's turn is queued again if it is parked on it; a row whose turn
  is still running (it parks in a moment) waits for the next pass; one whose turn is gone or
  moved on is delivered.

A kill anywhere loses nothing: every state is a committed row, and each step repeats safely.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Callable

from django.conf import settings
from django.db import connections, transaction

from agents_app.runtime.seams import FINAL_STATUSES, TurnStatus
from sessions_app import models as m
from sessions_app.services import batch_answered

if TYPE_CHECKING:  # the SDK's client is imported by a pass that has work, not by every worker
    from agents_app.providers.anthropic_batches import BatchApi, BatchState, Outcome

log = logging.getLogger(__name__)

S = m.BatchStatus
#: a batch listed while recovering counts if created this long before the rows were taken (clocks)
CLOCK_SKEW = 5.0
#: the most batches one pass retrieves
MAX_BATCHES = 50


def open_rows() -> bool:
    """Anything to do (the idle pass's one query)?"""
    return m.BatchCall.objects.filter(delivered=False).exists()


def poll(*, api: BatchApi | None = None, now: Callable[[], float] = time.time) -> dict[str, int]:
    """One pass; counts by part (for logs and tests)."""
    counts = {"sent": 0, "recovering": 0, "answered": 0, "resumed": 0, "cancelled": 0}
    if not open_rows():
        return counts
    own = api is None
    if api is None:
        from agents_app.providers.anthropic_batches import BatchApi

        api = BatchApi()
    try:
        # the answers an earlier pass wrote, first: between the results and the resume there is
        # always a committed state (a kill there is what tests/fault/test_batches_kill.py does)
        counts["resumed"] = deliver()
        counts["sent"] = send(api, now())
        counts["cancelled"] = cancel(api)
        counts["recovering"] = recover(api, now())
        counts["answered"] = collect(api)
    finally:
        if own:
            api.close()
    return counts


def send(api: BatchApi, now: float) -> int:
    limit = settings.JUNE_BATCH_POLL_LIMIT
    intents = m.BatchCall.objects.filter(status=S.INTENT, delivered=False)
    # a turn that ended before its request went (cancelled, reset) sends nothing
    intents.filter(turn__status__in=FINAL_STATUSES).update(
        status=S.FAILED, error="the turn ended before its request was sent", delivered=True
    )
    # a turn parks right after it writes its request: sent once it has (the next pass, at worst)
    waiting = intents.filter(turn__status=TurnStatus.SUSPENDED).order_by("created_at")
    pks = list(waiting[:limit].values_list("pk", flat=True))
    if not pks:
        return 0
    token = uuid.uuid4().hex
    # the intent to create, committed before the create: a pass that dies after it is recovered
    m.BatchCall.objects.filter(pk__in=pks, status=S.INTENT).update(status=S.SUBMITTING, token=token, submitted_at=now)
    taken = list(m.BatchCall.objects.filter(token=token, status=S.SUBMITTING).values_list("custom_id", "params"))
    if not taken:
        return 0
    try:
        batch_id = api.create(taken)
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429):
            # refused as a whole: nothing was created, the turns' steps fail (a retry of each)
            m.BatchCall.objects.filter(token=token, status=S.SUBMITTING).update(
                status=S.FAILED, error=f"the batch was refused: {exc}"[:2000]
            )
            return 0
        raise  # unknown whether it was created: the rows stay submitting, recovered after the grace
    m.BatchCall.objects.filter(token=token, status=S.SUBMITTING).update(status=S.SUBMITTED, batch_id=batch_id)
    log.info("batches: sent %d request(s) as %s", len(taken), batch_id)
    return len(taken)


CANCELLED = "cancelled at the API: its turn ended before the answer came"


def cancel(api: BatchApi) -> int:
    """Cancel the sent batches no waiting turn has a request in; their rows closed. Counts rows."""
    ended = m.BatchCall.objects.filter(status=S.SUBMITTED, delivered=False, turn__status__in=FINAL_STATUSES)
    # a batch another turn still waits on runs on: left out of the list, so that it never takes the
    # place of one nobody waits on (the list is bounded, and such a batch runs for up to a day)
    waited = m.BatchCall.objects.filter(status=S.SUBMITTED).exclude(turn__status__in=FINAL_STATUSES)
    ended = ended.exclude(batch_id__in=waited.values("batch_id"))
    batch_ids = list(ended.values_list("batch_id", flat=True).distinct()[:MAX_BATCHES])
    n = 0
    for batch_id in batch_ids:
        rows = m.BatchCall.objects.filter(batch_id=batch_id, status=S.SUBMITTED)
        if rows.exclude(turn__status__in=FINAL_STATUSES).exists():
            continue  # a turn came to wait on it since the list was read: it runs on
        try:
            api.cancel(batch_id)
        except Exception as exc:
            status = getattr(exc, "status_code", None)
            if not (isinstance(status, int) and 400 <= status < 500):
                raise  # unknown whether it was cancelled: the next pass asks again
            # refused (it ended meanwhile, or is gone): nothing to stop; the rows close as well
        n += rows.update(status=S.FAILED, error=CANCELLED, delivered=True)
    if n:
        log.info("batches: cancelled %d request(s) of ended turns", n)
    return n


def recover(api: BatchApi, now: float) -> int:
    stale = m.BatchCall.objects.filter(status=S.SUBMITTING, submitted_at__lt=now - settings.JUNE_BATCH_SUBMIT_GRACE)
    groups = dict(stale.values_list("token", "submitted_at").distinct()[: settings.JUNE_BATCH_POLL_LIMIT])
    n = 0
    for token, since in groups.items():
        found = [b.id for b in api.created_since(float(since or 0.0) - CLOCK_SKEW)]
        rows = m.BatchCall.objects.filter(token=token, status=S.SUBMITTING)
        if found:
            n += rows.update(status=S.RECOVERING, candidates=found)
        else:  # no batch was created since: the create never reached the API
            n += rows.update(status=S.INTENT, token="", submitted_at=None)
    if n:
        log.warning("batches: %d request(s) of a pass that stopped before its checkpoint", n)
    return n


def collect(api: BatchApi) -> int:
    rows = list(
        m.BatchCall.objects.filter(status__in=(S.SUBMITTED, S.RECOVERING))
        .order_by("submitted_at")[: settings.JUNE_BATCH_POLL_LIMIT]
        .values_list("custom_id", "status", "batch_id", "candidates")
    )
    wanted: dict[str, set[str]] = {}
    for cid, status, batch_id, candidates in rows:
        for bid in [batch_id] if status == S.SUBMITTED else list(candidates or ()):
            wanted.setdefault(bid, set()).add(cid)
    states: dict[str, BatchState] = {}
    outcomes: dict[str, Outcome] = {}
    for bid in list(wanted)[:MAX_BATCHES]:
        states[bid] = state = api.retrieve(bid)
        if state.ended:
            outcomes.update((o.custom_id, o) for o in api.results(bid, wanted[bid]))
    answered: list[m.BatchCall] = []
    again: list[str] = []
    for cid, status, batch_id, candidates in rows:
        looked = [batch_id] if status == S.SUBMITTED else list(candidates or ())
        if cid in outcomes:
            o = outcomes[cid]
            ok = o.kind == "succeeded"
            answered.append(
                m.BatchCall(
                    custom_id=cid,
                    status=S.DONE if ok else S.FAILED,
                    result=o.message if ok else None,
                    error=o.error,
                    batch_id=batch_id or _holder(looked, cid, states),
                )
            )
        elif all(bid in states and states[bid].ended for bid in looked):
            if status == S.SUBMITTED:
                answered.append(
                    m.BatchCall(
                        custom_id=cid,
                        status=S.FAILED,
                        error="the ended batch has no result for the request",
                        batch_id=batch_id,
                    )
                )
            else:
                again.append(cid)
    with transaction.atomic():
        m.BatchCall.objects.bulk_update(answered, ["status", "result", "error", "batch_id"], batch_size=500)
        if again:
            m.BatchCall.objects.filter(pk__in=again, status=S.RECOVERING).update(
                status=S.INTENT, token="", submitted_at=None, candidates=[]
            )
    return len(answered)


def _holder(looked: list[str], cid: str, states: dict[str, BatchState]) -> str:
    ended = [bid for bid in looked if bid in states and states[bid].ended]
    return ended[0] if len(ended) == 1 else ""


def deliver() -> int:
    rows = list(
        m.BatchCall.objects.filter(status__in=(S.DONE, S.FAILED), delivered=False)
        .order_by("created_at")[: settings.JUNE_BATCH_POLL_LIMIT]
        .values_list("custom_id", "key", "turn_id")
    )
    resumed = 0
    for cid, key, turn_id in rows:
        with transaction.atomic():
            if batch_answered(turn_id, key):
                resumed += 1
            elif m.Turn.objects.filter(pk=turn_id, status__in=(TurnStatus.QUEUED, TurnStatus.RUNNING)).exists():
                continue  # it parks on it in a moment, or already read its answer: the next pass sees
            m.BatchCall.objects.filter(pk=cid).update(delivered=True)
    return resumed


#: when the last pass ran (time.monotonic()); None: never
_polled_at: float | None = None


def next_pass() -> float | None:
    """When the next pass is due (``time.monotonic()``); None before the first."""
    return None if _polled_at is None else _polled_at + settings.JUNE_BATCH_POLL_SECONDS


def batch_pass() -> None:
    """The watchdog's pass: every ``JUNE_BATCH_POLL_SECONDS``; never fails the sweeper."""
    global _polled_at
    if _polled_at is not None and time.monotonic() - _polled_at < settings.JUNE_BATCH_POLL_SECONDS:
        return
    _polled_at = time.monotonic()
    try:
        counts = poll()
        if any(counts.values()):
            log.info("batches: %s", counts)
    except Exception:
        log.exception("batch pass failed")
        connections.close_all()
