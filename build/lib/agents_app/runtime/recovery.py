"""Recovery classification (the durable envelope, docs/workers.md): a pure function over the submission, its steps and
transcript, and ``now``. The sweeper and the worker act on its answer."""

from __future__ import annotations

from enum import StrEnum
from typing import Mapping, Sequence

from .messages import Message
from .position import NextKind, next_action
from .seams import FINAL_STATUSES, Phase, TurnRecord, TurnStatus


class RecoveryState(StrEnum):
    FINISHED = "finished"  # settled: nothing to do
    QUEUED = "queued"  # waiting for a worker
    LEASE_LIVE = "lease_live"  # another worker holds a live lease
    PARKED = "parked"  # waiting for a human; no worker needed
    BUDGET_EXHAUSTED = "budget_exhausted"  # fail it with a reason; the chain moves on
    OPEN_TURN = "open_turn"  # died before the opening committed: start over
    RESUME_MODEL = "resume_model"  # re-drive the model step
    RERUN_SYNC_TOOL = "rerun_sync_tool"  # its transaction rolled back: run it again (exactly-once)
    RERUN_ASYNC_TOOL = "rerun_async_tool"  # at-least-once: run it again
    REPORT_INTERRUPTED_TOOL = "report_interrupted_tool"  # record the interrupted marker instead
    SETTLE_COMMITTED = "settle_committed"  # the final reply committed; settle the turn


def call_was_in_flight(turn: TurnRecord, call_id: str, current_attempt: str | None) -> bool:
    """An earlier attempt recorded ``call_id`` as the call it was about to run, and died."""
    if turn.phase != Phase.TOOL_REQUEST_RECORDED:
        return False
    journal = turn.journal or {}
    request = journal.get("tool_request") or {}
    return request.get("id") == call_id and journal.get("attempt_id") not in (None, current_attempt)


def classify_submission_state(
    turn: TurnRecord,
    transcript: Sequence[Message],
    now: float,
    *,
    tools: Mapping[str, tuple[bool, str]] | None = None,
    max_attempts: int = 5,
) -> RecoveryState:
    """``tools`` maps a tool name to ``(is_async, on_interrupt)``; unknown tools count as sync.
    The position is read off the transcript, which commits in the same transaction as every
    step."""
    if turn.status in FINAL_STATUSES:
        return RecoveryState.FINISHED
    if turn.status == TurnStatus.SUSPENDED:
        return RecoveryState.PARKED
    if turn.status == TurnStatus.QUEUED:
        return RecoveryState.BUDGET_EXHAUSTED if turn.attempts >= max_attempts else RecoveryState.QUEUED
    if turn.lease_expires is not None and turn.lease_expires > now:
        return RecoveryState.LEASE_LIVE
    if turn.attempts >= max_attempts:
        return RecoveryState.BUDGET_EXHAUSTED
    nxt = next_action(transcript, turn.turn_id)
    if nxt.kind == NextKind.OPEN:
        return RecoveryState.OPEN_TURN
    if nxt.kind == NextKind.SETTLE:
        return RecoveryState.SETTLE_COMMITTED
    if nxt.kind == NextKind.MODEL:
        return RecoveryState.RESUME_MODEL
    call = nxt.calls[0]
    is_async, on_interrupt = (tools or {}).get(call.name, (False, "rerun"))
    if not is_async:
        return RecoveryState.RERUN_SYNC_TOOL
    if on_interrupt == "report" and call_was_in_flight(turn, call.id, None):
        return RecoveryState.REPORT_INTERRUPTED_TOOL
    return RecoveryState.RERUN_ASYNC_TOOL
