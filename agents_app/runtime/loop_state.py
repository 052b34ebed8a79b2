"""What one attempt of a turn holds, declared once. ``loop.TurnLoop`` owns it: it sets the
collaborators in ``__init__`` and the turn's state in ``run``; its steps (``loop_tools``,
``loop_compaction``) read and extend it through the methods declared here, which the loop
defines. The declarations are what a type checker reads (mypy, in the test command): a step
that reads an attribute nobody sets, or calls the loop with the wrong arguments, fails the run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from .agent import Agent
from .compaction import Compaction
from .control import Signals
from .limits import Limits
from .messages import Message, ToolCall
from .model import ToolSpec
from .observe import TurnObserver
from .seams import Commit, EventSink, Model, SessionRef, SessionStore, TurnRecord, TurnState, TurnStatus
from .tools import Tool

if TYPE_CHECKING:
    from .units import RecordingTx


class LoopState:
    # -- the collaborators (``TurnLoop.__init__``)
    agent: Agent
    store: SessionStore
    sink: EventSink
    model: Model
    signals: Signals
    observer: TurnObserver | None
    agent_for: Callable[[str], Agent]
    on_runnable: Callable[[list[tuple[str, SessionRef]]], Awaitable[None]] | None
    max_depth: int
    max_fanout: int

    # -- the attempt (``TurnLoop.run``)
    attempt_id: str | None
    state: TurnState
    turn: TurnRecord
    #: the live view from ``base`` on, as the store loaded it and the units extended it
    transcript: list[Message]
    base: int
    boundary: int
    summary_at: int | None
    compaction: Compaction
    window: int | None
    policy: dict[str, Any]
    tools: dict[str, Tool]
    specs: tuple[ToolSpec, ...]
    limits: Limits
    #: the earlier turns' part of the request, kept per attempt (``view.request_messages``)
    _history: tuple[Any, tuple[Message, ...]] | None

    if TYPE_CHECKING:  # defined by the loop; declared here for its steps
        @property
        def cancel_reason(self) -> str | None: ...

        async def _commit(self, work: Callable[[Any], None], *, tool_code: bool = False,
                          dispatch: bool = True) -> Commit: ...

        async def _fail(self, error: str, *, phase: str | None = None, step: str | None = None) -> TurnStatus: ...

        async def _cancel(self, owed: tuple[ToolCall, ...], *, index: int = -1, discarded: str = "") -> TurnStatus: ...

        async def _park(self, call: ToolCall, step_id: str, request: dict[str, Any],
                        also: list[tuple[ToolCall, dict[str, Any]]] | None = None) -> TurnStatus: ...

        async def _settle(self, text: str) -> TurnStatus: ...

        def _settle_txn(self, tx: RecordingTx, text: str, usage: dict[str, Any], *,
                        limited: str | None = None) -> None: ...

        def _provider_next(self, tx: RecordingTx, index: int) -> None: ...

        def _request_messages(self) -> tuple[Message, ...]: ...

        def children_budget(self, n: int) -> dict[str, int]: ...

        async def _dispatch(self, runnable: list[tuple[str, SessionRef]]) -> None: ...
