"""Control flow of one attempt: live signals (cancel), the park, and a retryable failure."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


class Park(BaseException):
    """Raised inside an async tool by ``request_input`` when no answer is stored (a
    BaseException, so a tool's own ``except Exception`` cannot swallow the park)."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__(request["id"])
        self.request = request


class RetryableTurnError(Exception):
    """The attempt failed in a way a redelivery may fix (nothing was committed)."""


@dataclass(slots=True)
class Signals:
    """Live signals for a running attempt; ``cancel_reason`` is also refreshed from every
    commit and heartbeat, so a durable cancel request is honoured without a live signal."""

    cancel_reason: str | None = None
    woke: asyncio.Event = field(default_factory=asyncio.Event)

    def cancel(self, reason: str) -> None:
        if not self.cancel_reason:
            self.cancel_reason = reason
        self.woke.set()
