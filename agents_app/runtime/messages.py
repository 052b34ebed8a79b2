"""The message log: what a session's transcript is made of.

A transcript is a list of :class:`Message`; the index of a message in the list is its
position, and the step ids of the engine are built from it (``model:<n>``,
``tool:<n>:<call_id>``). Messages are plain data with a JSON form so every store keeps them
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .frozen import fast_init


class Role(StrEnum):
    USER = "user"
    TRIGGER = "trigger"  # a proactive seed: no human sent it; attributed to ``by``
    ASSISTANT = "assistant"
    TOOL = "tool"
    SUMMARY = "summary"  # a compaction's summary of the messages before ``boundary``


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    input: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "input": self.input}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(data["id"], data["name"], data.get("input") or {})


@fast_init
@dataclass(frozen=True, slots=True)
class Message:
    """One entry of the message log.

    - ``user`` / ``trigger``: ``text`` (``by`` names who triggered a proactive seed).
    - ``assistant``: ``text``, ``tool_calls`` and ``blocks`` (the provider's raw content
      blocks that must be sent back unchanged, e.g. thinking blocks with signatures).
    - ``tool``: ``call_id``, ``name``, ``result`` (any JSON) and ``is_error``.
    - ``summary``: ``text`` summarizes the live view before position ``boundary`` (compaction).

    A ``user`` message may carry ``attachments``: metadata only (``id``, ``type``, ``name``,
    ``size``, ``pages``); the bytes live in the host's storage and are read per model call.
    """

    role: Role
    text: str = ""
    turn_id: str | None = None
    by: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    blocks: tuple[dict[str, Any], ...] = ()
    call_id: str | None = None
    name: str | None = None
    result: Any = None
    is_error: bool = False
    usage: dict[str, int] = field(default_factory=dict)
    boundary: int | None = None
    attachments: tuple[dict[str, Any], ...] = ()
    #: an ``assistant`` message's provider and model, ``<provider>:<model id>`` (``ModelReply.served_by``)
    served_by: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": str(self.role)}
        if self.text:
            data["text"] = self.text
        if self.turn_id:
            data["turn_id"] = self.turn_id
        if self.by:
            data["by"] = self.by
        if self.tool_calls:
            data["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.blocks:
            data["blocks"] = list(self.blocks)
        if self.role == Role.TOOL:
            data["call_id"] = self.call_id
            data["name"] = self.name
            data["result"] = self.result
            if self.is_error:
                data["is_error"] = True
        if self.usage:
            data["usage"] = self.usage
        if self.boundary is not None:
            data["boundary"] = self.boundary
        if self.attachments:
            data["attachments"] = [dict(a) for a in self.attachments]
        if self.served_by:
            data["served_by"] = self.served_by
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        # positional, and no work for what is absent: a load decodes every message of the live
        # transcript, so this runs thousands of times per turn in a long session
        get = data.get
        calls, blocks, usage, files = get("tool_calls"), get("blocks"), get("usage"), get("attachments")
        return cls(
            _ROLES.get(data["role"]) or Role(data["role"]),
            get("text", ""),
            get("turn_id"),
            get("by"),
            tuple([ToolCall.from_json(c) for c in calls]) if calls else (),
            tuple(blocks) if blocks else (),
            get("call_id"),
            get("name"),
            get("result"),
            bool(get("is_error", False)),
            dict(usage) if usage else {},
            get("boundary"),
            tuple(files) if files else (),
            get("served_by"),
        )


_ROLES = {str(role): role for role in Role}


def model_step_id(index: int) -> str:
    """The memo id of the model step whose assistant message lands at ``index``."""
    return f"model:{index}"


def tool_step_id(index: int, call_id: str) -> str:
    """The memo id of a tool call made by the assistant message at ``index``."""
    return f"tool:{index}:{call_id}"


def compact_step_id(index: int) -> str:
    """The memo id of the compaction whose summary message lands at ``index``."""
    return f"compact:{index}"


def input_step_id(turn_id: str, input_id: str) -> str:
    """The key under which a human answer is stored (turn-scoped)."""
    return f"input:{turn_id}:{input_id}"
