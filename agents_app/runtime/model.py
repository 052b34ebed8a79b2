"""What a Model receives and yields: one async streaming call per model step."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .frozen import fast_init
from .messages import Message, ToolCall


class StopReason(StrEnum):
    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    REFUSAL = "refusal"
    PAUSE_TURN = "pause_turn"
    CONTENT_FILTER = "content_filter"
    CONTEXT_OVERFLOW = "context_overflow"
    ERROR = "error"


#: Stops after which an empty reply means the provider failed, not that it had nothing to say.
ABNORMAL_STOPS = frozenset(
    {
        StopReason.MAX_TOKENS,
        StopReason.REFUSAL,
        StopReason.CONTENT_FILTER,
        StopReason.CONTEXT_OVERFLOW,
        StopReason.PAUSE_TURN,
        StopReason.ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@fast_init
@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    #: stable per (turn, step, attempt): lets a provider dedupe or trace a stream
    stream_key: str = ""
    #: ``turn`` (a model step) or ``compact`` (a compaction's summarizing call)
    purpose: str = "turn"
    #: False: the model may not call a tool in this reply (a turn's last call at its limit). The
    #: tools stay in the request: the transcript's earlier calls refer to them
    tools_allowed: bool = True
    #: set: the call may be answered later at the batch price (``<turn id>:<step id>``, the same
    #: for every attempt of the step); a model that batches raises ``ModelParked`` until it has
    #: the answer. Empty: answer now (a chat turn, a compaction's call)
    batch_key: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@fast_init
@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@fast_init
@dataclass(frozen=True, slots=True)
class ModelReply:
    """The end of a stream: the whole reply, why it stopped, and what it cost."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    blocks: tuple[dict[str, Any], ...] = ()
    stop_reason: StopReason = StopReason.END_TURN
    usage: dict[str, int] = field(default_factory=dict)
    #: who answered, ``<provider>:<model id>`` (``vertex:claude-sonnet-4-6``); empty when the model
    #: does not say (the demo, a scripted model). A fallback list makes it vary per step
    served_by: str = ""

    @property
    def is_empty(self) -> bool:
        return not self.text and not self.tool_calls


ModelChunk = TextDelta | ReasoningDelta | ModelReply


class ModelError(Exception):
    """A model call failed; ``retryable`` says whether redelivering the turn may help."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ModelParked(Exception):
    """Raised by a model's ``stream`` before it yields anything, for a request it sent to be
    answered later (a Message Batch, ``request.batch_key``): the loop parks the turn (suspended,
    ``pending[reason]`` = ``detail``) and no worker waits. Whoever collects the answer resumes
    the turn through a store operation; the step then runs again and the model, holding the
    answer, yields it. Not a ``ModelError``: nothing failed."""

    def __init__(self, reason: str, detail: dict[str, Any]) -> None:
        super().__init__(f"parked on {reason}")
        self.reason = reason
        self.detail = detail


class ContextOverflowError(ModelError):
    """The request does not fit the model's context window (e.g. a 400 "prompt is too long"):
    the loop compacts and redoes the step, as for the stop reason CONTEXT_OVERFLOW."""

    def __init__(self, message: str = "the prompt is longer than the model's context window") -> None:
        super().__init__(message, retryable=False)
