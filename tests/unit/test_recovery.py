"""classify_submission_state: the recovery rules of seed 003, by table."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import (
    Message,
    Phase,
    RecoveryState,
    Role,
    SessionRef,
    ToolCall,
    TurnInput,
    TurnRecord,
    TurnStatus,
    classify_submission_state,
)

NOW = 1_000.0
TOOLS = {"note": (False, "rerun"), "ping": (True, "rerun"), "charge": (True, "report")}

USER = Message(Role.USER, "hello", turn_id="t1")
EARLIER = [Message(Role.USER, "before", turn_id="t0"), Message(Role.ASSISTANT, "old", turn_id="t0")]


def calls(*names: str) -> Message:
    return Message(
        Role.ASSISTANT, turn_id="t1", tool_calls=tuple(ToolCall(f"c{i}", n, {}) for i, n in enumerate(names))
    )


def result(call_id: str) -> Message:
    return Message(Role.TOOL, turn_id="t1", call_id=call_id, name="x", result="ok")


def turn(
    status: TurnStatus = TurnStatus.RUNNING,
    *,
    expires: float | None = NOW - 1,
    attempts: int = 1,
    in_flight: str | None = None,
    by_attempt: str | None = "dead",
) -> TurnRecord:
    phase, journal = Phase.BEFORE_PROVIDER, {}
    if in_flight:
        phase = Phase.TOOL_REQUEST_RECORDED
        journal = {"tool_request": {"id": in_flight, "name": "x", "input": {}}, "attempt_id": by_attempt}
    return TurnRecord(
        "t1",
        SessionRef("a", "s1"),
        status,
        TurnInput("hello"),
        attempts=attempts,
        lease_expires=expires,
        phase=str(phase),
        journal=journal,
    )


TABLE: list[tuple[str, TurnRecord, list[Message], RecoveryState]] = [
    ("completed", turn(TurnStatus.COMPLETED), [USER], RecoveryState.FINISHED),
    ("failed", turn(TurnStatus.FAILED), [USER], RecoveryState.FINISHED),
    ("cancelled", turn(TurnStatus.CANCELLED), [], RecoveryState.FINISHED),
    ("suspended", turn(TurnStatus.SUSPENDED), [USER, calls("charge")], RecoveryState.PARKED),
    ("queued", turn(TurnStatus.QUEUED, attempts=0), [], RecoveryState.QUEUED),
    ("queued, retried before", turn(TurnStatus.QUEUED, attempts=4), [], RecoveryState.QUEUED),
    ("queued, budget spent", turn(TurnStatus.QUEUED, attempts=5), [USER], RecoveryState.BUDGET_EXHAUSTED),
    ("running, budget spent", turn(attempts=5), [USER], RecoveryState.BUDGET_EXHAUSTED),
    ("live lease", turn(expires=NOW + 5), [USER], RecoveryState.LEASE_LIVE),
    ("live lease beats a spent budget", turn(expires=NOW + 5, attempts=9), [USER], RecoveryState.LEASE_LIVE),
    ("no opening yet", turn(), [], RecoveryState.OPEN_TURN),
    ("no opening, earlier turns", turn(), EARLIER, RecoveryState.OPEN_TURN),
    ("no lease at all", turn(expires=None), [], RecoveryState.OPEN_TURN),
    ("opening committed", turn(), [*EARLIER, USER], RecoveryState.RESUME_MODEL),
    (
        "every call answered",
        turn(),
        [USER, calls("note", "ping"), result("c0"), result("c1")],
        RecoveryState.RESUME_MODEL,
    ),
    (
        "final reply committed",
        turn(),
        [USER, Message(Role.ASSISTANT, "done", turn_id="t1")],
        RecoveryState.SETTLE_COMMITTED,
    ),
    ("sync tool owed", turn(in_flight="c0"), [USER, calls("note")], RecoveryState.RERUN_SYNC_TOOL),
    ("unknown tool counts as sync", turn(in_flight="c0"), [USER, calls("mystery")], RecoveryState.RERUN_SYNC_TOOL),
    ("async tool owed", turn(in_flight="c0"), [USER, calls("ping")], RecoveryState.RERUN_ASYNC_TOOL),
    ("report tool, not in flight", turn(), [USER, calls("charge")], RecoveryState.RERUN_ASYNC_TOOL),
    (
        "report tool, another call in flight",
        turn(in_flight="c9"),
        [USER, calls("charge")],
        RecoveryState.RERUN_ASYNC_TOOL,
    ),
    (
        "report tool, journal without attempt",
        turn(in_flight="c0", by_attempt=None),
        [USER, calls("charge")],
        RecoveryState.RERUN_ASYNC_TOOL,
    ),
    ("report tool in flight", turn(in_flight="c0"), [USER, calls("charge")], RecoveryState.REPORT_INTERRUPTED_TOOL),
    (
        "report tool in flight mid-batch",
        turn(in_flight="c1"),
        [USER, calls("note", "charge"), result("c0")],
        RecoveryState.REPORT_INTERRUPTED_TOOL,
    ),
    (
        "sync call first in a mixed batch",
        turn(in_flight="c0"),
        [USER, calls("note", "charge")],
        RecoveryState.RERUN_SYNC_TOOL,
    ),
]


@pytest.mark.parametrize(("case", "rec", "transcript", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_classify_submission_state(case: str, rec: TurnRecord, transcript: list[Message], expected: RecoveryState):
    assert classify_submission_state(rec, transcript, NOW, tools=TOOLS, max_attempts=5) == expected


def test_the_table_covers_every_recovery_state():
    assert {row[3] for row in TABLE} == set(RecoveryState)


def test_classification_is_pure():
    rec, transcript = turn(in_flight="c0"), [USER, calls("charge")]
    before: Any = (rec, list(transcript))
    for _ in range(2):
        assert classify_submission_state(rec, transcript, NOW, tools=TOOLS) == RecoveryState.REPORT_INTERRUPTED_TOOL
    assert (rec, transcript) == before
