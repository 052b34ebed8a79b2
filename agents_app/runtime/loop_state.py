"""What one attempt of a turn holds (``Attempt``), and what a step may ask of the loop that
owns it (``TurnOwner``).

``loop.TurnLoop`` owns both: it builds the ``Attempt`` in ``run`` and hands it, with itself as
the ``TurnOwner``, to its steps (``loop_model``, ``loop_tools``, ``loop_compaction``). A step
reads the attempt, and changes it only through a checkpoint the owner commits (which takes up
what the checkpoint wrote: ``Attempt.take_up``). Both are what a type checker reads (mypy, in
the test command): a step that reads state the attempt does not hold, asks the owner with the
wrong arguments, or reaches for a part of the loop the owner does not offer, fails the run."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from . import limits, subagents, view
from .agent import BATCH_SOURCES
from .compaction import Compaction
from .limits import Limits
from .messages import Message, Role, ToolCall, model_step_id
from .model import ToolSpec
from .position import turn_tail_start
from .seams import Commit, Phase, SessionRef, TurnRecord, TurnState, TurnStatus
from .tools import Tool
from .units import RecordingTx, stream_key


class Attempt:
    """One attempt of one turn: the turn as its claim loaded it, its live view (``transcript``
    from ``base`` on, as the store loaded it and the checkpoints extended it), and what the
    turn runs under (its policy, tools, limits, compaction). The methods are what follows from
    that state alone: the model's request, what the turn spent, a checkpoint taken up."""

    __slots__ = (
        "attempt_id",
        "state",
        "turn",
        "transcript",
        "base",
        "boundary",
        "summary_at",
        "compaction",
        "window",
        "policy",
        "tools",
        "specs",
        "limits",
        "announced",
        "_history",
    )

    def __init__(
        self,
        state: TurnState,
        attempt_id: str | None,
        *,
        compaction: Compaction,
        window: int | None,
        policy: dict[str, Any],
        tools: dict[str, Tool],
        specs: tuple[ToolSpec, ...],
        limits: Limits,
    ) -> None:
        self.attempt_id = attempt_id
        self.state = state
        self.turn: TurnRecord = state.turn
        self.transcript: list[Message] = state.transcript
        self.base, self.boundary, self.summary_at = state.base, state.boundary, state.summary
        self.compaction, self.window = compaction, window
        self.policy, self.tools, self.specs, self.limits = policy, tools, specs, limits
        #: the model step a checkpoint of this attempt announced (its stream key), so that step
        #: writes no journal entry of its own
        self.announced: str | None = None
        #: the earlier turns' part of the request, kept per attempt (``view.request_messages``)
        self._history: tuple[Any, tuple[Message, ...]] | None = None

    # -- the view -------------------------------------------------------------------------------

    def tail(self) -> list[Message]:
        """The current turn's messages."""
        return self.transcript[turn_tail_start(self.transcript, self.turn.turn_id) :]

    def request_messages(self) -> tuple[Message, ...]:
        """The live view as the model sees it (``view.request_messages``); the earlier turns'
        part is kept for the attempt's next steps."""
        self._history, messages = view.request_messages(
            self.transcript,
            self.turn,
            base=self.base,
            boundary=self.boundary,
            summary_at=self.summary_at,
            history=self._history,
        )
        return messages

    def take_up(self, rec: RecordingTx) -> None:
        """A committed checkpoint's writes: its messages, its steps, a moved boundary."""
        self.transcript.extend(rec.appended)
        self.state.steps.update(rec.steps)
        if rec.moved is not None:
            self._moved(*rec.moved)

    def _moved(self, boundary: int, summary_at: int) -> None:
        """The boundary moved: forget what the model no longer sees (the turn's own messages
        stay: the loop reads where it stands off them)."""
        opening = self.base + turn_tail_start(self.transcript, self.turn.turn_id)
        start = min(boundary, opening)
        if start > self.base:
            del self.transcript[: start - self.base]
            self.base = start
        self.boundary, self.summary_at = boundary, summary_at
        self._history = None

    # -- the model steps ------------------------------------------------------------------------

    def stream_key(self, step_id: str) -> str:
        return stream_key(self.turn.turn_id, step_id, self.attempt_id)

    def provider_next(self, tx: RecordingTx, index: int) -> None:
        """In a checkpoint after which the loop goes straight to the model step whose reply lands
        at ``index`` (a step's last tool result; the opening's is ``opening_txn``): record
        provider_started with that step's stream key in it, so the step needs no journal write
        of its own. Recovery reads the position off the transcript, not the phase: a crash
        before the stream opens re-drives the same model step either way."""
        key = self.stream_key(model_step_id(index))
        tx.journal(Phase.PROVIDER_STARTED, stream_key=key)
        self.announced = key

    def batch_key(self, step_id: str) -> str:
        """The model step's ``ModelRequest.batch_key``: set when the turn batches its calls (its
        policy says ``batch``, or its schedule does through the turn's target), only for the
        sources nobody waits on live (``agent.BATCH_SOURCES``); empty otherwise."""
        source = self.turn.input.source
        if source not in BATCH_SOURCES:
            return ""
        wants = self.policy.get("batch") is True or (
            source == "schedule" and (self.turn.input.target or {}).get("batch") is True
        )
        return f"{self.turn.turn_id}:{step_id}" if wants else ""

    # -- what the turn spent --------------------------------------------------------------------

    def usage_with(self, extra: dict[str, int], *, calls: int = 0, served_by: str = "") -> dict[str, Any]:
        """What the turn spent: its own model calls' usage and their count (``model_calls``;
        ``extra``, ``calls`` and ``served_by``: a reply not yet in the transcript), and its
        children's trees apart (``children``), so a sum over turns counts each call once, priced
        at its own agent's model. ``served_by``: who answered its calls, each once, in order,
        where the provider says (a fallback list may answer from several)."""
        total: dict[str, Any] = {}
        served: list[str] = []
        for m in self.tail():
            if m.role in (Role.ASSISTANT, Role.SUMMARY):  # a compaction's call costs too
                own = m.role == Role.ASSISTANT and m.turn_id == self.turn.turn_id
                calls += own
                if own and m.served_by and m.served_by not in served:
                    served.append(m.served_by)
                for k, v in m.usage.items():
                    total[k] = total.get(k, 0) + int(v)
        for k, v in extra.items():
            total[k] = total.get(k, 0) + int(v)
        if served_by and served_by not in served:
            served.append(served_by)
        if calls:
            total["model_calls"] = calls
        if served:
            total["served_by"] = served
        children = subagents.children_usage(self.state.spawned)
        if children:
            total["children"] = children
        return total

    def limit_reached(self, messages: list[Message]) -> str | None:
        """The limit the turn's next model call (after ``messages``) must be the last for."""
        return self.limits.reached(*self._spent(messages))

    def children_budget(self, n: int) -> dict[str, int]:
        """Each of ``n`` new children's share of what this turn has left (ValueError: too little)."""
        return limits.shares(self.limits, *self._spent(self.transcript), len(self.state.spawned), n)

    def _spent(self, messages: list[Message]) -> tuple[int, int]:
        return limits.spent(messages, self.turn.turn_id, subagents.children_usage(self.state.spawned))


class TurnOwner(Protocol):
    """What a step may ask of the loop that owns the turn (``loop.TurnLoop``): a checkpoint, and
    each way a turn ends (its own checkpoint, returning the status it ended in). A step never
    commits or dispatches by itself."""

    async def commit(
        self, work: Callable[[RecordingTx], None], *, tool_code: bool = False, dispatch: bool = True
    ) -> Commit:
        """One checkpoint of ``work``, taken up by the attempt; ``tool_code``: ``work`` runs a
        sync tool, whose own writes commit with it."""
        ...

    async def dispatch(self, runnable: list[tuple[str, SessionRef]]) -> None:
        """Hand on the turns a checkpoint made runnable."""
        ...

    async def fail(self, error: str, *, phase: str | None = None, step: str | None = None) -> TurnStatus:
        """Failed with ``error`` (in ``phase``, at ``step``); what the turn spent is recorded."""
        ...

    async def cancel(self, owed: tuple[ToolCall, ...], *, index: int = -1, discarded: str = "") -> TurnStatus:
        """Cancelled: ``owed`` (the calls of step ``index`` not run) get the cancelled fill."""
        ...

    async def park(
        self,
        call: ToolCall,
        step_id: str,
        request: dict[str, Any],
        also: list[tuple[ToolCall, dict[str, Any]]] | None = None,
    ) -> TurnStatus:
        """Suspended on ``request`` (and ``also``: the same step's later approvals, asked at once)."""
        ...

    async def settle(self, text: str) -> TurnStatus:
        """Completed with ``text``, the turn's answer."""
        ...
