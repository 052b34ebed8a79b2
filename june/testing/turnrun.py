"""What a test asserts on: one turn as it stands after the tester drove it (``TurnRun``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agents_app.runtime import ModelRequest, TurnState
from agents_app.runtime.records import LoggedEvent


class Driver(Protocol):
    """What a ``TurnRun`` asks of the tester that made it (``JuneTester``)."""

    def answer(
        self, turn: TurnRun, value: Any, *, user: Any = None, operator: Any = None, input_id: str | None = None
    ) -> TurnRun:
        """Answer the turn's parked request, then drive it until it settles or parks again."""

    def cancel(self, turn: TurnRun) -> TurnRun:
        """Cancel the turn (at once when queued or parked, at its next boundary when running)."""

    def read(self, turn: TurnRun) -> TurnRun:
        """The turn as the store holds it now."""


@dataclass(frozen=True)
class ToolCallRun:
    """One tool call of the turn: what the model asked for and what the tool returned."""

    id: str
    name: str
    input: dict[str, Any]
    result: Any = None
    is_error: bool = False


@dataclass
class TurnRun:
    """A turn read back from the store: ``status`` (``completed``, ``suspended``, ``failed``,
    ``cancelled``…), the final ``text``, its ``tool_calls`` with inputs and results, its logged
    ``events`` (JSON, as a client reads them), ``usage``, ``error``, the pending ``request``
    when it waits for an answer; ``model_requests``: what a scripted model was sent; ``units``
    and ``crashes``: what committed and how often a planned crash struck."""

    tester: Driver = field(repr=False)
    agent: str
    session: str
    turn_id: str
    status: str
    text: str
    tool_calls: list[ToolCallRun]
    events: list[dict[str, Any]]
    usage: dict[str, int]
    error: dict[str, Any] | None
    request: dict[str, Any] | None
    attempts: int
    messages: list[dict[str, Any]]
    model_requests: list[ModelRequest] = field(default_factory=list, repr=False)
    units: list[str] = field(default_factory=list)
    crashes: int = 0

    @property
    def event_types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def calls(self, name: str) -> list[ToolCallRun]:
        """The calls of one tool, in order."""
        return [c for c in self.tool_calls if c.name == name]

    # -- what a person does next (each returns the turn as it stands after the tester drove it) --

    def answer(self, value: Any, *, user: Any = None, operator: Any = None, input_id: str | None = None) -> TurnRun:
        """Answer the parked request as ``user`` (the chat's answer) or as a staff ``operator``
        (the inbox's), by the rules the site applies (the answerers, the agent's
        ``authorize_answer``, the schema), then drive the turn on."""
        return self.tester.answer(self, value, user=user, operator=operator, input_id=input_id)

    def approve(self, *, user: Any = None, operator: Any = None, input_id: str | None = None) -> TurnRun:
        return self.answer(True, user=user, operator=operator, input_id=input_id)

    def deny(self, *, user: Any = None, operator: Any = None, input_id: str | None = None) -> TurnRun:
        return self.answer(False, user=user, operator=operator, input_id=input_id)

    def cancel(self) -> TurnRun:
        return self.tester.cancel(self)

    def refresh(self) -> TurnRun:
        return self.tester.read(self)


def tool_calls_of(messages: list[Any]) -> list[ToolCallRun]:
    results = {m.call_id: m for m in messages if str(m.role) == "tool"}
    calls = []
    for m in messages:
        for call in m.tool_calls:
            done = results.get(call.id)
            calls.append(
                ToolCallRun(
                    id=call.id,
                    name=call.name,
                    input=dict(call.input),
                    result=done.result if done is not None else None,
                    is_error=bool(done.is_error) if done is not None else False,
                )
            )
    return calls


def turn_run(
    tester: Driver, state: TurnState, logged: list[LoggedEvent], *, requests: list[ModelRequest], plan: Any
) -> TurnRun:
    rec = state.turn
    mine = [m for m in state.transcript if m.turn_id == rec.turn_id]
    request = (rec.pending or {}).get("request") if str(rec.status) == "suspended" else None
    return TurnRun(
        tester=tester,
        agent=rec.session.agent,
        session=rec.session.key,
        turn_id=rec.turn_id,
        status=str(rec.status),
        text=rec.text,
        tool_calls=tool_calls_of(mine),
        events=[e.event.to_json() for e in logged if e.event.turn_id == rec.turn_id],
        usage=dict(rec.usage),
        error=rec.error,
        request=request,
        attempts=rec.attempts,
        messages=[m.to_json() for m in mine],
        model_requests=list(requests),
        units=list(plan.units) if plan is not None else [],
        crashes=plan.crashes if plan is not None else 0,
    )
