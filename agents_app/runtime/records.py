"""The plain data that crosses the engine's seams (``seams``): statuses, a session's and a
turn's records, what a store's operation returns. Immutable values, no behaviour beyond
small derivations."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from .events import TurnEvent
from .frozen import fast_init
from .messages import Message


class TurnStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_STATUSES = frozenset({TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED})
#: statuses a caller of ``result()`` stops waiting on
SETTLED_STATUSES = FINAL_STATUSES | {TurnStatus.SUSPENDED}


class SessionStatus(StrEnum):
    NEW = "new"
    IDLE = "idle"
    RUNNING = "running"
    SUSPENDED = "suspended"


class CancelReason(StrEnum):
    REQUESTED = "requested"
    REPLACED = "replaced"
    RESET = "reset"
    #: a child turn cancelled because its parent was (``rules.CASCADE``)
    PARENT = "parent"


class Phase(StrEnum):
    """The turn journal (the durable envelope's four phases, plus parked): where a turn was
    when its process stopped."""

    BEFORE_PROVIDER = "before_provider"
    PROVIDER_STARTED = "provider_started"
    TOOL_REQUEST_RECORDED = "tool_request_recorded"
    COMMITTED = "committed"
    PARKED = "parked"


@fast_init
@dataclass(frozen=True, slots=True)
class SessionRef:
    agent: str
    key: str

    def __str__(self) -> str:
        return f"{self.agent}/{self.key}"


@fast_init
@dataclass(frozen=True, slots=True)
class TurnInput:
    """What opens a turn. ``kind`` is inbound (someone spoke) or proactive (a seed).

    ``user`` is the speaker as the channel knows them: ``{"id", "name", "attested"}``;
    ``source`` is the channel's name (web, http, webhook, schedule), never set by the user.
    """

    text: str
    kind: str = "inbound"
    by: str | None = None
    source: str | None = None
    user: dict[str, Any] | None = None
    target: dict[str, Any] | None = None
    raw: Any = None
    #: the W3C traceparent of the request that made the turn (``observe``); None untraced
    trace: str | None = None
    #: when it was queued (epoch seconds), kept only when observed: the metrics' queue wait
    queued_at: float | None = None
    #: files sent with the text: metadata only (``id``, ``type``, ``name``, ``size``, ``pages``),
    #: copied onto the opening user message; the host keeps the bytes
    attachments: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        # the inbound event is stored without ``raw``; ``trace`` only when there is one
        data: dict[str, Any] = {
            "text": self.text,
            "kind": self.kind,
            "by": self.by,
            "source": self.source,
            "user": self.user,
            "target": self.target,
        }
        if self.trace is not None:
            data["trace"] = self.trace
        if self.queued_at is not None:
            data["queued_at"] = self.queued_at
        if self.attachments:
            data["attachments"] = [dict(a) for a in self.attachments]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TurnInput:
        return cls(
            text=data.get("text", ""),
            kind=data.get("kind", "inbound"),
            by=data.get("by"),
            source=data.get("source"),
            user=data.get("user"),
            target=data.get("target"),
            trace=data.get("trace") if isinstance(data.get("trace"), str) else None,
            queued_at=data.get("queued_at") if isinstance(data.get("queued_at"), (int, float)) else None,
            attachments=tuple(a for a in data.get("attachments") or () if isinstance(a, dict)),
        )


@fast_init
@dataclass(frozen=True, slots=True)
class TurnRecord:
    """The submission: one row per turn."""

    turn_id: str
    session: SessionRef
    status: TurnStatus
    input: TurnInput
    generation: int = 0
    cancel_reason: str | None = None
    attempt_id: str | None = None
    attempts: int = 0
    lease_owner: str | None = None
    lease_expires: float | None = None
    phase: str | None = None
    journal: dict[str, Any] = field(default_factory=dict)
    pending: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    text: str = ""
    error: dict[str, Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    #: subagents (``subagents.py``): the parent turn, how deep in the tree, children still owed
    parent: str | None = None
    depth: int = 0
    waiting: int = 0

    def evolve(self, **changes: Any) -> TurnRecord:
        return replace(self, **changes)


@dataclass(slots=True)
class TurnState:
    """Everything a turn needs to continue, loaded in a constant number of queries."""

    turn: TurnRecord
    transcript: list[Message]
    #: step ids with a stored result (this turn): what a replay must not announce twice
    steps: set[str]
    #: input id -> stored answer (this turn only: answers are turn-scoped)
    answers: dict[str, Any]
    #: ``<call_id>:<index>`` -> a settled child's result (``subagents.py``)
    spawned: dict[str, Any] = field(default_factory=dict)
    #: position of ``transcript[0]``: the live transcript starts at the session's boundary (or
    #: at this turn's opening, when a compaction of this turn cut inside it)
    base: int = 0
    #: the session's boundary: the model sees the summary, then the messages from here on
    boundary: int = 0
    #: position of the live summary message, if the session was compacted
    summary: int | None = None
    #: the opening's checkpoint, when the claim committed it in its own transaction
    #: (``SessionStore.claim_and_load``'s ``opening``); ``transcript`` is as it was before it
    opened: Commit | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class LoggedEvent:
    seq: int
    event: TurnEvent
    #: when it was committed (ISO 8601, UTC), where the store says: frames carry it as ``at``
    at: str | None = field(default=None, compare=False)

    def frame(self) -> dict[str, Any]:
        """The event as a client's frame: ``seq``, the event's JSON, and ``at`` when known."""
        data: dict[str, Any] = {"seq": self.seq, **self.event.to_json()}
        if self.at is not None:
            data["at"] = self.at
        return data


@dataclass(slots=True)
class Commit:
    """What a unit of work left behind: the events it logged (with their sequence numbers) and
    the cancel request the turn carried at commit time."""

    events: list[LoggedEvent]
    cancel_reason: str | None
    #: turns this unit made runnable, to dispatch: the children it spawned, the parent its child's
    #: ending woke, and — when the unit settles its turn for good — the next queued turn of the
    #: session's chain (the hand-off; read in the unit's transaction, under the session's lock)
    runnable: list[tuple[str, SessionRef]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ChildTurn:
    """A child turn a unit spawns (``Tx.spawn``): its id and session are derived from the parent
    turn, the call and the spawn index, so a replay names the same child."""

    turn_id: str
    session: SessionRef
    input: TurnInput
    #: the parent's step key its result is stored under: ``spawn:<parent>:<call_id>:<index>``
    step: str
    depth: int
    policy: dict[str, Any] | None = None


@dataclass(slots=True)
class Outcome:
    """What a host operation (create, cancel, answer, reset) changed: the events it logged, to
    publish, and the running turns that were handed a cancel request, to ring."""

    events: list[LoggedEvent] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    turn: TurnRecord | None = None
    #: reset only: the archived generation's name (``"key#gN"``) and the new generation number
    previous_session: str | None = None
    generation: int | None = None
    #: turns the operation made runnable besides its own: a parent woken by a cancelled child
    runnable: list[tuple[str, SessionRef]] = field(default_factory=list)
    #: running children of cancelled turns that were handed ``rules.CASCADE``, to ring
    cascaded: list[str] = field(default_factory=list)
