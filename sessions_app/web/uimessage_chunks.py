"""June's turn events as the AI SDK's UI message stream chunks (npm ``ai`` 7, stream protocol
``v1``): a pure fold, one turn's events in, the chunks a ``useChat`` client reads out.

The message is the turn: its id is the turn id, so a replay (the resume request), an approval's
continuation and the history (``uimessage_history``) all name the same assistant message. Tools
are *dynamic* tool parts (``dynamic-tool``): the client does not know June's tools in advance.

What maps: ``message.delta`` / ``message.completed`` → ``text-start/delta/end`` (a completed
message with no deltas seen — a replay — is sent whole; deltas are live only, never replayed);
``reasoning.delta`` → ``reasoning-start/delta/end`` (live only: thinking is not in the event
log); ``action.requested`` → ``tool-input-start/delta/available`` (June has the whole input at
once: one delta); ``action.completed`` → ``tool-output-available`` or ``tool-output-error``;
``input.requested`` of a tool approval the caller may answer → ``tool-approval-request``
(any other request: a ``data-june-input`` part, the turn shown as waiting); ``input.answered``
→ ``tool-approval-response``; ``turn.completed`` → ``finish``; ``turn.failed`` → ``error``;
``turn.cancelled`` → ``abort``; ``turn.queued`` (a stream that started its turn: first, before
any worker takes it) → a transient ``data-june-turn`` part ``{"status": "queued", "turnId",
"at"}``. A model step is ``start-step`` … ``finish-step``.
"""

from __future__ import annotations

import json
from typing import Any

#: the response header a UI message stream carries (``ai``'s UI_MESSAGE_STREAM_HEADERS)
PROTOCOL_HEADER = ("x-vercel-ai-ui-message-stream", "v1")
DONE = b"data: [DONE]\n\n"
#: a tool approval's answers (agents_app.runtime.approval: approve | edit | reject)
APPROVING = frozenset({"approve", "edit"})


def sse(chunk: dict[str, Any]) -> bytes:
    """One chunk as the protocol frames it: ``data: <json>`` and a blank line, no event name."""
    return b"data: " + json.dumps(chunk, separators=(",", ":"), default=str).encode() + b"\n\n"


class UIChunks:
    """Fold one turn's events (their JSON, in log order, deltas among them) into chunks.

    ``open()`` starts the message, ``feed(event)`` maps one event, ``close()`` ends what is
    still open (a stream cut by its time cap ends without ``finish``: the client resumes)."""

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.text: str | None = None  # the open text part's text so far
        self.reasoning = False
        self.reasoning_text = ""
        self.parts = 0
        self.in_step = False
        self.finished = False

    def open(self) -> list[dict[str, Any]]:
        return [{"type": "start", "messageId": self.turn_id}]

    def _id(self, kind: str) -> str:
        self.parts += 1
        return f"{self.turn_id}-{kind}{self.parts}"

    def _step(self) -> list[dict[str, Any]]:
        if self.in_step:
            return []
        self.in_step = True
        return [{"type": "start-step"}]

    def _end_text(self) -> list[dict[str, Any]]:
        out = []
        if self.reasoning:
            out.append({"type": "reasoning-end", "id": f"{self.turn_id}-reasoning"})
            self.reasoning, self.reasoning_text = False, ""
        if self.text is not None:
            out.append({"type": "text-end", "id": self._text_id})
            self.text = None
        return out

    def _end_step(self) -> list[dict[str, Any]]:
        out = self._end_text()
        if self.in_step:
            out.append({"type": "finish-step"})
            self.in_step = False
        return out

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        handler = HANDLERS.get(kind) if isinstance(kind, str) else None
        return handler(self, event) if handler is not None and not self.finished else []

    def close(self) -> list[dict[str, Any]]:
        return self._end_step()

    # -- one handler per event type (HANDLERS) ---------------------------------------------------

    def _reasoning_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        piece = new_text(self.reasoning_text, event)
        if piece is None:
            return []
        out = self._step()
        rid = f"{self.turn_id}-reasoning"
        if not self.reasoning:
            self.reasoning = True
            out.append({"type": "reasoning-start", "id": rid})
        self.reasoning_text += piece
        out.append({"type": "reasoning-delta", "id": rid, "delta": piece})
        return out

    def _message_delta(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        piece = new_text(self.text or "", event)
        if piece is None:
            return []
        out = self._step()
        if self.reasoning:
            out.append({"type": "reasoning-end", "id": f"{self.turn_id}-reasoning"})
            self.reasoning = False
        if self.text is None:
            self._text_id = self._id("text")
            self.text = ""
            out.append({"type": "text-start", "id": self._text_id})
        self.text += piece
        out.append({"type": "text-delta", "id": self._text_id, "delta": piece})
        return out

    def _message_completed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The committed text: what the deltas missed is sent now (a replay sends it all)."""
        full = str(event.get("text") or "")
        if not full and self.text is None:
            return self._end_text()
        out = self._step()
        out += self._message_delta({"text": full, "offset": 0})
        return out + self._end_text()

    def _action_requested(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        call = event.get("call") or {}
        call_id, name, args = str(call.get("id") or ""), str(call.get("name") or ""), call.get("input") or {}
        out = self._step() + self._end_text()
        head = {"toolCallId": call_id, "toolName": name, "dynamic": True}
        return out + [
            {"type": "tool-input-start", **head},
            {"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": json.dumps(args)},
            {"type": "tool-input-available", **head, "input": args},
        ]

    def _action_completed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = str(event.get("call_id") or "")
        out = self._end_step()
        if event.get("error"):
            return out + [{"type": "tool-output-error", "toolCallId": call_id, "errorText": str(event["error"])}]
        return out + [{"type": "tool-output-available", "toolCallId": call_id, "output": event.get("result")}]

    def _input_requested(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        request = event.get("request") or {}
        call_id = str(event.get("call_id") or "")
        out = self._end_step()
        if request.get("kind") == "tool_approval" and call_id and event.get("may_answer", True):
            return out + [
                {
                    "type": "tool-approval-request",
                    "approvalId": str(request.get("id") or ""),
                    "toolCallId": call_id,
                    **({"reason": request["prompt"]} if isinstance(request.get("prompt"), str) else {}),
                }
            ]
        # a question the caller cannot answer here (an operator's policy), or not a tool approval
        data = {
            "id": request.get("id"),
            "kind": request.get("kind") or "input",
            "prompt": request.get("prompt"),
            "schema": request.get("schema"),
            "toolCallId": call_id or None,
            "mayAnswer": bool(event.get("may_answer", False)),
        }
        return out + [{"type": "data-june-input", "id": f"{self.turn_id}-{request.get('id')}", "data": data}]

    def _input_answered(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        input_id = str(event.get("input_id") or "")
        answer = event.get("answer")
        if not input_id.startswith("approve:"):
            return []
        decision = answer.get("decision") if isinstance(answer, dict) else None
        return [{"type": "tool-approval-response", "approvalId": input_id, "approved": decision in APPROVING}]

    def _turn_completed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self.finished = True
        reason = "length" if event.get("limited") else "stop"
        return self._end_step() + [{"type": "finish", "finishReason": reason}]

    def _turn_failed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self.finished = True
        return self._end_step() + [{"type": "error", "errorText": str(event.get("error") or "the turn failed")}]

    def _turn_cancelled(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self.finished = True
        return self._end_step() + [{"type": "abort", "reason": str(event.get("reason") or "requested")}]

    def _queued(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        data = {"status": "queued", "turnId": self.turn_id, "at": event.get("at")}
        return [{"type": "data-june-turn", "id": f"{self.turn_id}-queued", "data": data, "transient": True}]

    def _parked(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The stream ends on a parked turn (``turn_follow``): the message waits for an answer."""
        self.finished = True
        return self._end_step() + [{"type": "finish", "finishReason": "tool-calls"}]


def new_text(streamed: str, event: dict[str, Any]) -> str | None:
    """What a live delta adds to the text streamed so far, or None. A delta's ``offset`` places
    it in its message's text (``outbox.sink``): one past a gap (a stream joined mid-message: a
    resume) waits for the sink's next snapshot (offset 0, the whole text), and text already sent
    is never sent again; a completed message is a delta at offset 0 of its whole text."""
    text = str(event.get("text") or "")
    offset = event.get("offset")
    offset = len(streamed) if not isinstance(offset, int) or offset < 0 else offset
    if offset > len(streamed):
        return None
    whole = streamed[:offset] + text
    if not whole.startswith(streamed) or len(whole) == len(streamed):
        return None
    return whole[len(streamed) :]


HANDLERS = {
    "turn.queued": UIChunks._queued,
    "reasoning.delta": UIChunks._reasoning_delta,
    "message.delta": UIChunks._message_delta,
    "message.completed": UIChunks._message_completed,
    "action.requested": UIChunks._action_requested,
    "action.completed": UIChunks._action_completed,
    "input.requested": UIChunks._input_requested,
    "input.answered": UIChunks._input_answered,
    "turn.completed": UIChunks._turn_completed,
    "turn.failed": UIChunks._turn_failed,
    "turn.cancelled": UIChunks._turn_cancelled,
    "turn.parked": UIChunks._parked,
}
