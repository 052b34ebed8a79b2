"""What the loop's units write, as plain functions of a Tx: the opening, and each ending
(settle, fail, cancel, park). The loop decides; these write. Also the recording Tx through which
the loop writes every unit (it mirrors appended messages into the loop's transcript), and
``Opening``, which offers the opening to the attempt's claim, so a store that can commits both
in one transaction (SQLite's)."""

from __future__ import annotations

from typing import Any, Callable

from . import events as ev
from .messages import Message, Role, ToolCall, model_step_id, tool_step_id
from .position import NextKind, next_action
from .seams import Phase, TurnRecord, TurnState, TurnStatus, Tx
from .tools import CANCELLED_RESULT


class RecordingTx:
    """Wraps the store's Tx to mirror appended messages into the loop's transcript."""

    __slots__ = ("tx", "base", "appended", "steps", "moved")

    def __init__(self, tx: Tx, base: int) -> None:
        self.tx = tx
        self.base = base
        self.appended: list[Message] = []
        self.steps: list[str] = []
        self.moved: tuple[int, int] | None = None

    def append(self, message: Message) -> int:
        index = self.base + len(self.appended)
        self.tx.append(message, index)
        self.appended.append(message)
        return index

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        self.steps.append(step_id)
        self.tx.step(step_id, index, data)

    def boundary(self, index: int, summary_index: int) -> None:
        self.moved = (index, summary_index)
        self.tx.boundary(index, summary_index)

    # the rest of the Tx passes through; written out, as a miss on a slotted class raises and
    # catches an AttributeError before ``__getattr__`` (several times per unit)
    def emit(self, event: ev.TurnEvent) -> None:
        self.tx.emit(event)

    def journal(self, phase: Phase, **data: Any) -> None:
        self.tx.journal(phase, **data)

    def settle(self, status: TurnStatus, **outcome: Any) -> None:
        self.tx.settle(status, **outcome)

    def spawn(self, child: Any) -> None:
        self.tx.spawn(child)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tx, name)


def stream_key(turn_id: str, step_id: str, attempt_id: str | None) -> str:
    """The key a model call streams under (and the journal's provider_started records)."""
    return f"{turn_id}:{step_id}:{attempt_id or '-'}"


def opening_txn(tx: Any, turn: TurnRecord, attempt_id: str | None) -> str:
    """The opening checkpoint's writes (through the loop's recording ``tx``): the user's (or
    the trigger's) message, ``turn.started``, and the journal's provider_started for the first
    model call, which follows at once. Returns that call's stream key."""
    role = Role.TRIGGER if turn.input.kind == "proactive" else Role.USER
    files = turn.input.attachments
    at = tx.append(Message(role=role, text=turn.input.text, turn_id=turn.turn_id, by=turn.input.by, attachments=files))
    tx.emit(ev.TurnStarted(turn.turn_id, trigger=turn.input.kind, text=turn.input.text, attachments=files))
    key = stream_key(turn.turn_id, model_step_id(at + 1), attempt_id)
    tx.journal(Phase.PROVIDER_STARTED, stream_key=key)
    if turn.status != TurnStatus.RUNNING:  # an attempt's claim made it (and its session) running
        tx.settle(TurnStatus.RUNNING)
    return key


class Opening:
    """The opening checkpoint, offered to the attempt's claim (``SessionStore.claim_and_load``'s
    ``opening``): a store that can commits it in the claim's own transaction (SQLite's), one
    transaction fewer per turn; one that cannot leaves it to the loop, which opens as before.
    Called with the claimed state, it returns the opening's work, or None when the turn is not
    to be opened now (opened already, cancelled, over its retry budget, not running). After the
    claim, ``recorded`` holds what the work wrote, for the loop to take up (``TurnLoop.run``)."""

    __slots__ = ("attempt_id", "max_attempts", "recorded", "key")

    def __init__(self, attempt_id: str, max_attempts: int) -> None:
        self.attempt_id, self.max_attempts = attempt_id, max_attempts
        self.recorded: RecordingTx | None = None
        self.key: str | None = None

    def __call__(self, state: TurnState) -> Callable[[Tx], None] | None:
        turn = state.turn
        if (
            turn.status != TurnStatus.RUNNING
            or turn.cancel_reason
            or turn.attempts > self.max_attempts
            or next_action(state.transcript, turn.turn_id).kind != NextKind.OPEN
        ):
            return None
        at = state.base + len(state.transcript)

        def work(tx: Tx) -> None:
            self.recorded = rec = RecordingTx(tx, at)
            self.key = opening_txn(rec, turn, self.attempt_id)

        return work


def settle_txn(tx: Any, turn_id: str, text: str, usage: dict[str, Any], *, limited: str | None = None) -> None:
    tx.emit(ev.TurnCompleted(turn_id, text=text, limited=limited))
    tx.journal(Phase.COMMITTED)
    tx.settle(TurnStatus.COMPLETED, text=text, usage={**usage, "limited": limited} if limited else usage)


def fail_txn(tx: Any, turn_id: str, error: str, phase: str | None, step: str | None, usage: dict[str, Any]) -> None:
    tx.emit(ev.TurnFailed(turn_id, error=error, phase=phase, step=step))
    tx.journal(Phase.COMMITTED)
    tx.settle(TurnStatus.FAILED, error={"message": error, "phase": phase, "step": step}, usage=usage)


def cancel_txn(
    tx: Any, turn_id: str, owed: tuple[ToolCall, ...], index: int, reason: str, discarded: str, usage: dict[str, Any]
) -> None:
    # unrun calls get a synthetic result so the transcript stays valid for the model
    for call in owed:
        at = tx.append(Message(Role.TOOL, turn_id=turn_id, call_id=call.id, name=call.name, result=CANCELLED_RESULT))
        tx.step(tool_step_id(index, call.id), at)
    tx.emit(ev.TurnCancelled(turn_id, reason=reason, discarded=discarded))
    tx.journal(Phase.COMMITTED)
    tx.settle(TurnStatus.CANCELLED, error={"reason": reason}, usage=usage)


def park_txn(
    tx: Any, turn_id: str, asks: list[tuple[ToolCall, dict[str, Any]]], pending: dict[str, Any], usage: dict[str, Any]
) -> None:
    """Parked on the first ask and on the step's other calls' approvals (``asks``), shown at once."""
    for asked, ask in asks:
        tx.emit(ev.InputRequested(turn_id, request=ask, call_id=asked.id))
    tx.journal(Phase.PARKED, call_id=asks[0][0].id, input_id=asks[0][1]["id"])
    tx.settle(TurnStatus.SUSPENDED, pending=pending, usage=usage)
