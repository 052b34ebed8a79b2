"""What ``AgentSession.result`` and ``turn`` give back: a turn's outcome, and the error of a
non-interactive turn that parked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import JuneError
from .seams import TurnRecord, TurnStatus


@dataclass
class TurnResult:
    turn_id: str
    status: TurnStatus
    text: str = ""
    error: dict[str, Any] | None = None
    request: dict[str, Any] | None = None  # the pending input when suspended

    @classmethod
    def of(cls, rec: TurnRecord) -> TurnResult:
        request = (rec.pending or {}).get("request") if rec.status == TurnStatus.SUSPENDED else None
        return cls(rec.turn_id, rec.status, rec.text, rec.error, request)


class TurnParkedError(JuneError):
    """``turn()`` is non-interactive: it rejects when the turn parks."""

    http_status = 409
    code = "turn_parked"

    def __init__(self, result: TurnResult) -> None:
        super().__init__(f"turn {result.turn_id} is waiting for input {result.request}")
        self.result = result
