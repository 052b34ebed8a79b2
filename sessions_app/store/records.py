"""Rows to the runtime's records, and the collector a unit of work writes through."""

from __future__ import annotations

import json
from typing import Any

from agents_app.runtime import events as ev
from agents_app.runtime.errors import NotFound
from agents_app.runtime.messages import Message
from agents_app.runtime import subagents
from agents_app.runtime.seams import FINAL_STATUSES, ChildTurn, Phase, SessionRef, TurnInput, TurnRecord, TurnStatus
from sessions_app import models as m
from sessions_app.store.checkpoint import dumps


def record_of(turn: m.Turn, session: m.Session | None = None) -> TurnRecord:
    s = session or turn.session
    return TurnRecord(
        turn_id=turn.id,
        session=SessionRef(s.agent, s.key),
        status=TurnStatus(turn.status),
        input=TurnInput.from_json(turn.input or {}),
        generation=turn.generation,
        cancel_reason=turn.cancel_reason,
        attempt_id=turn.attempt_id,
        attempts=turn.attempts,
        lease_owner=turn.lease_owner,
        lease_expires=turn.lease_expires_at,
        phase=turn.phase,
        journal=turn.journal or {},
        pending=turn.pending,
        policy=turn.policy,
        text=turn.text or "",
        error=turn.error,
        usage=turn.usage or {},
        parent=turn.parent_id,
        depth=turn.depth,
        waiting=turn.waiting,
    )


def turn_row(turn_id: str) -> m.Turn:
    try:
        return m.Turn.objects.select_related("session").get(pk=turn_id)
    except m.Turn.DoesNotExist:
        raise NotFound(f"no turn {turn_id}") from None


def journal_changes(attempt_id: str | None, phase: Phase, data: dict[str, Any]) -> dict[str, Any]:
    return {"phase": str(phase), "journal": dumps({**data, "attempt_id": attempt_id})}


def loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


class UnitWriter:
    """The Tx of a unit of work: collects its writes; the checkpoint writes them in a handful
    of statements (one round trip on PostgreSQL)."""

    def __init__(self, turn_id: str, attempt_id: str | None) -> None:
        self.turn_id = turn_id
        self.attempt_id = attempt_id
        self.messages: list[tuple[int, Message]] = []
        self.steps: list[tuple[str, int | None, Any]] = []
        self.events: list[ev.TurnEvent] = []
        self.turn_changes: dict[str, Any] = {}
        self.children: list[ChildTurn] = []
        #: what this turn reports to its parent, if it has one, when the unit settles it for good
        self.result: dict[str, Any] | None = None
        #: (boundary, summary index) when a compaction moved the session's boundary
        self.moved: tuple[int, int] | None = None

    def append(self, message: Message, index: int) -> None:
        self.messages.append((index, message))

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        self.steps.append((step_id, index, data))

    def emit(self, event: ev.TurnEvent) -> None:
        self.events.append(event)

    def journal(self, phase: Phase, **data: Any) -> None:
        self.turn_changes.update(journal_changes(self.attempt_id, phase, data))

    def boundary(self, index: int, summary_index: int) -> None:
        self.moved = (index, summary_index)

    def settle(self, status: TurnStatus, *, text: str = "", error: dict[str, Any] | None = None,
               pending: dict[str, Any] | None = None, usage: dict[str, int] | None = None) -> None:
        self.turn_changes["status"] = str(status)
        self.turn_changes["text"] = text
        self.turn_changes["error"] = dumps(error) if error is not None else None
        self.turn_changes["pending"] = dumps(pending) if pending is not None else None
        if usage is not None:
            self.turn_changes["usage"] = dumps(usage)
        if status in FINAL_STATUSES:
            self.result = subagents.result_of(self.turn_id, status, text, error, usage)

    def spawn(self, child: ChildTurn) -> None:
        self.children.append(child)

    def into(self, other: "UnitWriter") -> None:
        """Hand what this writer collected to ``other`` (a unit recorded once, written there)."""
        other.messages, other.steps, other.events = self.messages, self.steps, self.events
        other.turn_changes, other.children, other.result = self.turn_changes, self.children, self.result
        other.moved = self.moved
