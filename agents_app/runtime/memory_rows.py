"""The in-memory store's rows (a session, a turn) and its unit of work, staged until the unit
returns (``memory.InMemorySessionStore`` applies it all or nothing)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .messages import Message
from .seams import ChildTurn, Phase, SessionRef, SessionStatus, TurnRecord, TurnStatus


@dataclass
class SessionRow:
    ref: SessionRef
    status: SessionStatus = SessionStatus.NEW
    generation: int = 0
    seq: int = 0
    messages: list[Message] = field(default_factory=list)
    events: list[tuple[int, int, ev.TurnEvent]] = field(default_factory=list)  # (generation, seq, event)
    archive: dict[int, list[Message]] = field(default_factory=dict)
    #: the live generation's boundary and summary position (compaction)
    boundary: int = 0
    summary: int | None = None
    #: the last generation number handed out (a reset or a branch takes the next)
    generations: int = 0
    #: generation -> its place in a tree of branches (``memory_branches``)
    branches: dict[int, BranchRow] = field(default_factory=dict)


@dataclass
class BranchRow:
    parent: int | None
    fork_index: int
    #: the branch's compaction while another one is live
    boundary: int = 0
    summary: int | None = None


@dataclass
class TurnRow:
    record: TurnRecord
    order: int
    steps: dict[str, Any] = field(default_factory=dict)


class MemoryTx:
    """A unit's writes, staged: the store applies them when the unit returns (all or nothing)."""

    def __init__(self, session: SessionRow, turn: TurnRow) -> None:
        self.turn = turn
        self.session = session
        self.messages: list[Message] = []
        self.steps: dict[str, Any] = {}
        self.events: list[ev.TurnEvent] = []
        self.changes: dict[str, Any] = {}
        self.children: list[ChildTurn] = []
        self.moved: tuple[int, int] | None = None

    def append(self, message: Message, index: int) -> None:
        live = (
            self.session.messages
            if self.turn.record.generation == self.session.generation
            else self.session.archive.get(self.turn.record.generation, [])
        )
        if index != len(live) + len(self.messages):
            raise RuntimeError(f"transcript position {index} is taken or out of order")
        self.messages.append(message)

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        self.steps[step_id] = {"index": index, "data": data}

    def emit(self, event: ev.TurnEvent) -> None:
        self.events.append(event)

    def journal(self, phase: Phase, **data: Any) -> None:
        self.changes["phase"] = str(phase)
        self.changes["journal"] = {**data, "attempt_id": self.turn.record.attempt_id}

    def boundary(self, index: int, summary_index: int) -> None:
        self.moved = (index, summary_index)

    def settle(
        self,
        status: TurnStatus,
        *,
        text: str = "",
        error: dict[str, Any] | None = None,
        pending: dict[str, Any] | None = None,
        usage: dict[str, int] | None = None,
        waiting: int | None = None,
    ) -> None:
        self.changes.update(status=status, text=text, error=error, pending=pending)
        if usage is not None:
            self.changes["usage"] = usage
        if waiting is not None:
            self.changes["waiting"] = waiting

    def spawn(self, child: ChildTurn) -> None:
        self.children.append(child)
