"""Typed turn events and their JSON form.

Every event but the deltas is written to the durable event log in the transaction that makes
it true; deltas are published live and never stored.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar

from .frozen import fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class TurnEvent:
    type: ClassVar[str] = ""
    #: deltas are live only: never stored, never replayed
    durable: ClassVar[bool] = True
    turn_id: str

    def to_json(self) -> dict[str, Any]:
        # shallow: payloads are JSON values already, and asdict's deep copy is on the hot path
        names, values = _reader(type(self))  # type: ignore[arg-type]  # a class is hashable
        data = dict(zip(names, values(self)))
        data["type"] = self.type
        return data


@functools.cache
def _reader(cls: Any) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """A dataclass's field names (``fields`` builds them anew at every call), and a reader of
    their values in one call (the first name once more: an ``attrgetter`` of one name returns
    its value, not a tuple; ``zip`` stops at the names' end)."""
    names = tuple(f.name for f in fields(cls))
    return names, operator.attrgetter(*names, names[0])


def _with_attachments(data: dict[str, Any], attachments: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """An event's JSON with its attachments' metadata, or without the key when it has none: most
    messages attach nothing, and no row should carry an empty list."""
    if attachments:
        data["attachments"] = [dict(a) for a in attachments]
    else:
        del data["attachments"]
    return data


@fast_init
@dataclass(frozen=True, slots=True)
class TurnStarted(TurnEvent):
    type: ClassVar[str] = "turn.started"
    trigger: str = "inbound"  # inbound | proactive | resume
    text: str = ""
    #: the opening message's attachments (metadata), so a live chat can show them
    attachments: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _with_attachments(TurnEvent.to_json(self), self.attachments)


@fast_init
@dataclass(frozen=True, slots=True)
class ReasoningDelta(TurnEvent):
    type: ClassVar[str] = "reasoning.delta"
    durable: ClassVar[bool] = False
    text: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class MessageDelta(TurnEvent):
    type: ClassVar[str] = "message.delta"
    durable: ClassVar[bool] = False
    text: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class MessageCompleted(TurnEvent):
    type: ClassVar[str] = "message.completed"
    text: str = ""
    index: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class ActionRequested(TurnEvent):
    type: ClassVar[str] = "action.requested"
    call: dict[str, Any] = field(default_factory=dict)  # {id, name, input}


@fast_init
@dataclass(frozen=True, slots=True)
class ActionCompleted(TurnEvent):
    type: ClassVar[str] = "action.completed"
    call_id: str = ""
    name: str = ""
    result: Any = None
    error: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class InputRequested(TurnEvent):
    type: ClassVar[str] = "input.requested"
    request: dict[str, Any] = field(default_factory=dict)  # {id, prompt, schema, answerers}
    call_id: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class InputAnswered(TurnEvent):
    """Beyond the seed: an answer was accepted (who answered, from where), so every tab
    showing the approval card can close it."""

    type: ClassVar[str] = "input.answered"
    input_id: str = ""
    by: str | None = None
    #: the answerer's display name, where the host knows it
    name: str | None = None
    #: the answer itself (the card shows "Approved by …" / "Denied by …") and the channel it came by
    answer: Any = None
    via: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class ChildStarted(TurnEvent):
    """A tool call spawned a child turn (``subagents.py``): ``child`` is ``{turn_id, agent,
    session, index, goal}``, the reference a client follows to the child's own events."""

    type: ClassVar[str] = "child.started"
    call_id: str = ""
    child: dict[str, Any] = field(default_factory=dict)


@fast_init
@dataclass(frozen=True, slots=True)
class TurnCompleted(TurnEvent):
    type: ClassVar[str] = "turn.completed"
    text: str = ""
    #: the limit the turn reached (``limits``: its last model call answered without tools); only
    #: in the JSON of a turn that reached one (every completed turn's row would carry a null)
    limited: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"turn_id": self.turn_id, "text": self.text, "type": self.type}
        if self.limited:
            data["limited"] = self.limited
        return data


@fast_init
@dataclass(frozen=True, slots=True)
class TurnFailed(TurnEvent):
    type: ClassVar[str] = "turn.failed"
    error: str = ""
    phase: str | None = None  # model | tool
    step: str | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class TurnCancelled(TurnEvent):
    type: ClassVar[str] = "turn.cancelled"
    reason: str = "requested"  # requested | replaced | reset
    #: the reply text streamed before the cancel, not part of the conversation: kept so a
    #: reload and the archive still show what was discarded (bounded: ``DISCARDED_MAX``)
    discarded: str = ""

    def to_json(self) -> dict[str, Any]:
        data = TurnEvent.to_json(self)
        if not self.discarded:
            del data["discarded"]  # most cancels discard nothing: no empty key in every row
        return data


DISCARDED_MAX = 20_000


@fast_init
@dataclass(frozen=True, slots=True)
class SessionReset(TurnEvent):
    """Beyond the seed: the live session was archived as ``previous_session``."""

    type: ClassVar[str] = "session.reset"
    previous_session: str = ""
    generation: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class BranchSwitched(TurnEvent):
    """Another branch of the conversation is live: ``generation`` (a new one forked from
    ``previous`` at message ``at``, or one switched back to: ``at`` is None). Logged first in
    the branch that became live, so a page showing another branch knows to reload."""

    type: ClassVar[str] = "branch.switched"
    generation: int = 0
    previous: int = 0
    at: int | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class CompactionStarted(TurnEvent):
    """A compaction began (its summarizing call is under way)."""

    type: ClassVar[str] = "compaction.started"
    reason: str = "proactive"  # proactive | reactive
    step: str = ""
    #: messages of the view that are being summarized
    messages: int = 0
    tokens_before: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class CompactionCompleted(TurnEvent):
    """The summary and the new boundary committed: the model now sees ``summary`` and the
    messages from position ``boundary`` on; ``index`` is the summary message's position."""

    type: ClassVar[str] = "compaction.completed"
    reason: str = "proactive"
    step: str = ""
    messages: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    boundary: int = 0
    index: int = 0
    summary: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class CompactionFailed(TurnEvent):
    """A proactive compaction could not be made (the turn completed anyway; the boundary did
    not move). A reactive one that fails fails its turn (``turn.failed``)."""

    type: ClassVar[str] = "compaction.failed"
    reason: str = "proactive"
    step: str = ""
    error: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class TakeoverStarted(TurnEvent):
    """A person (``by``: their display name) answers in the agent's place from now on;
    ``running``: what became of a turn running then (``cancel`` | ``finish``)."""

    type: ClassVar[str] = "takeover.started"
    by: str = ""
    running: str = "cancel"


@fast_init
@dataclass(frozen=True, slots=True)
class TakeoverEnded(TurnEvent):
    """The person handed the conversation back to the agent."""

    type: ClassVar[str] = "takeover.ended"
    by: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class PersonMessage(TurnEvent):
    """A message written while a person had the session: the user's (``role`` ``user``) or the
    person's (``role`` ``person``, ``by`` their display name). It joins the transcript at the
    hand back (a reply let finish may still be writing it meanwhile)."""

    type: ClassVar[str] = "person.message"
    role: str = "user"
    text: str = ""
    by: str = ""
    #: the user's message's attachments (metadata), as ``turn.started`` carries an opening's
    attachments: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return _with_attachments(TurnEvent.to_json(self), self.attachments)


EVENT_TYPES: dict[str, type[TurnEvent]] = {
    cls.type: cls
    for cls in (
        TurnStarted,
        ReasoningDelta,
        MessageDelta,
        MessageCompleted,
        ActionRequested,
        ActionCompleted,
        InputRequested,
        InputAnswered,
        ChildStarted,
        TurnCompleted,
        TurnFailed,
        TurnCancelled,
        SessionReset,
        BranchSwitched,
        CompactionStarted,
        CompactionCompleted,
        CompactionFailed,
        TakeoverStarted,
        TakeoverEnded,
        PersonMessage,
    )
}

TERMINAL_TYPES = frozenset({"turn.completed", "turn.failed", "turn.cancelled", "input.requested"})


def event_from_json(data: dict[str, Any]) -> TurnEvent:
    cls = EVENT_TYPES[data["type"]]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
