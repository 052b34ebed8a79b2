"""June's turn events as AG-UI events (protocol 1.0, the ``ag-ui-protocol`` package's own types):
a pure fold, one turn's events in, one AG-UI run out.

A run is the turn (or the part of it after an answer): ``RUN_STARTED`` (with the protocol
version), a ``STATE_SNAPSHOT`` of what June has as state (the session, the turn, its branch),
``TEXT_MESSAGE_START/CONTENT/END`` from the reply's deltas and its committed text (a replay sends
it whole), ``REASONING_*`` from live thinking, ``TOOL_CALL_START/ARGS/END`` for each call (its
whole input as one ARGS: June does not stream a call's input), ``TOOL_CALL_RESULT``; it ends with
``RUN_FINISHED`` (outcome ``success``; ``interrupt`` listing the questions the turn is parked
on; ``cancelled``) or ``RUN_ERROR``. A run that started its turn says first, before any worker
takes it, that the turn is queued: a ``CUSTOM`` event ``june.turn.queued`` (``{"turnId", "at"}``). Needs the ``agui`` extra (``pip install june-django[agui]``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from sessions_app.web.uimessage_chunks import new_text

try:
    from ag_ui.core import (
        PROTOCOL_VERSION,
        BaseEvent,
        CustomEvent,
        Interrupt,
        ReasoningEndEvent,
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
        ReasoningStartEvent,
        RunErrorEvent,
        RunFinishedCancelledOutcome,
        RunFinishedEvent,
        RunFinishedInterruptOutcome,
        RunFinishedSuccessOutcome,
        RunStartedEvent,
        StateSnapshotEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
except ImportError as exc:  # a site without the extra: say which one
    raise ImproperlyConfigured(
        "June's AG-UI endpoint needs the ag-ui-protocol package: pip install 'june-django[agui]'"
    ) from exc


def encode(event: BaseEvent) -> bytes:
    """One event as AG-UI's SSE framing writes it (``ag_ui.encoder.EventEncoder``)."""
    return b"data: " + event.model_dump_json(by_alias=True).encode() + b"\n\n"


class AguiRun:
    """Fold one turn's events (JSON, in log order, deltas among them) into one AG-UI run."""

    def __init__(
        self, *, thread_id: str, run_id: str, turn_id: str, state: dict[str, Any], messages_before: int = 0
    ) -> None:
        """``messages_before``: the turn's replies an earlier run sent (a run that continues the turn
        after an answer numbers its messages on, so a client keeps them apart)."""
        self.thread_id, self.run_id, self.turn_id, self.state = thread_id, run_id, turn_id, state
        self.text: str | None = None
        self.reasoning: str | None = None
        self.messages = messages_before
        self.interrupts: list[Interrupt] = []
        self.finished = False

    def open(self) -> list[BaseEvent]:
        return [
            RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION),
            StateSnapshotEvent(snapshot=self.state),
        ]

    def feed(self, event: dict[str, Any]) -> list[BaseEvent]:
        kind = event.get("type")
        handler = HANDLERS.get(kind) if isinstance(kind, str) else None
        return handler(self, event) if handler is not None and not self.finished else []

    def close(self) -> list[BaseEvent]:
        return self._end_text()

    def _message_id(self, kind: str) -> str:
        return f"{self.turn_id}-{kind}{self.messages}"

    def _end_text(self) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self.reasoning is not None:
            mid = self._message_id("reasoning")
            out += [ReasoningMessageEndEvent(message_id=mid), ReasoningEndEvent(message_id=mid)]
            self.reasoning = None
        if self.text is not None:
            out.append(TextMessageEndEvent(message_id=self._message_id("text")))
            self.text = None
        return out

    # -- one handler per event type (HANDLERS) ---------------------------------------------------

    def _reasoning_delta(self, event: dict[str, Any]) -> list[BaseEvent]:
        piece = new_text(self.reasoning or "", event)
        if piece is None:
            return []
        out: list[BaseEvent] = []
        if self.reasoning is None:
            self.messages += 1
            mid = self._message_id("reasoning")
            self.reasoning = ""
            out += [ReasoningStartEvent(message_id=mid), ReasoningMessageStartEvent(message_id=mid, role="reasoning")]
        self.reasoning += piece
        return [*out, ReasoningMessageContentEvent(message_id=self._message_id("reasoning"), delta=piece)]

    def _message_delta(self, event: dict[str, Any]) -> list[BaseEvent]:
        piece = new_text(self.text or "", event)
        if piece is None:
            return []
        out = self._end_text() if self.reasoning is not None else []
        if self.text is None:
            self.messages += 1
            self.text = ""
            out.append(TextMessageStartEvent(message_id=self._message_id("text"), role="assistant"))
        self.text += piece
        return [*out, TextMessageContentEvent(message_id=self._message_id("text"), delta=piece)]

    def _message_completed(self, event: dict[str, Any]) -> list[BaseEvent]:
        return self._message_delta({"text": event.get("text") or "", "offset": 0}) + self._end_text()

    def _action_requested(self, event: dict[str, Any]) -> list[BaseEvent]:
        call = event.get("call") or {}
        call_id, name = str(call.get("id") or ""), str(call.get("name") or "")
        parent = self._message_id("text") if self.messages else None
        return [
            *self._end_text(),
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent),
            ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(call.get("input") or {})),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def _action_completed(self, event: dict[str, Any]) -> list[BaseEvent]:
        call_id = str(event.get("call_id") or "")
        if event.get("error"):
            content = json.dumps({"error": str(event["error"])})
        else:
            result = event.get("result")
            content = result if isinstance(result, str) else json.dumps(result, default=str)
        return [
            *self._end_text(),
            ToolCallResultEvent(message_id=f"{call_id}-result", tool_call_id=call_id, content=content, role="tool"),
        ]

    def _input_requested(self, event: dict[str, Any]) -> list[BaseEvent]:
        request = event.get("request") or {}
        if "may_answer" not in event:  # a replay's question, answered since (turn_follow)
            return self._end_text()
        schema = request.get("schema")
        self.interrupts.append(
            Interrupt(
                id=str(request.get("id") or ""),
                reason=str(request.get("kind") or "input"),
                message=request.get("prompt") if isinstance(request.get("prompt"), str) else None,
                tool_call_id=str(event.get("call_id")) if event.get("call_id") else None,
                response_schema=schema if isinstance(schema, dict) else None,
                # an operator's question: the run waits, but this caller cannot answer it
                metadata={"mayAnswer": bool(event.get("may_answer", False))},
            )
        )
        return self._end_text()

    def _queued(self, event: dict[str, Any]) -> list[BaseEvent]:
        return [CustomEvent(name="june.turn.queued", value={"turnId": self.turn_id, "at": event.get("at")})]

    def _parked(self, event: dict[str, Any]) -> list[BaseEvent]:
        self.finished = True
        outcome = RunFinishedInterruptOutcome(interrupts=self.interrupts)
        return [*self._end_text(), RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)]

    def _turn_completed(self, event: dict[str, Any]) -> list[BaseEvent]:
        self.finished = True
        outcome = RunFinishedSuccessOutcome()
        return [
            *self._end_text(),
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=event.get("text"), outcome=outcome),
        ]

    def _turn_failed(self, event: dict[str, Any]) -> list[BaseEvent]:
        self.finished = True
        return [
            *self._end_text(),
            RunErrorEvent(message=str(event.get("error") or "the turn failed"), code="turn_failed"),
        ]

    def _turn_cancelled(self, event: dict[str, Any]) -> list[BaseEvent]:
        self.finished = True
        outcome = RunFinishedCancelledOutcome()
        return [*self._end_text(), RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome)]


HANDLERS = {
    "turn.queued": AguiRun._queued,
    "reasoning.delta": AguiRun._reasoning_delta,
    "message.delta": AguiRun._message_delta,
    "message.completed": AguiRun._message_completed,
    "action.requested": AguiRun._action_requested,
    "action.completed": AguiRun._action_completed,
    "input.requested": AguiRun._input_requested,
    "turn.parked": AguiRun._parked,
    "turn.completed": AguiRun._turn_completed,
    "turn.failed": AguiRun._turn_failed,
    "turn.cancelled": AguiRun._turn_cancelled,
}
