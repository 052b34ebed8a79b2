"""The three seams the engine depends on (the store and its writer, the event sink, the model);
the plain data that crosses them is ``records``, re-exported here.

The turn loop (``loop.py``) sees only these Protocols, so the same loop runs on the in-memory
store in unit tests and on SQLite or PostgreSQL in the site.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Protocol, Sequence

from .events import TurnEvent
from .messages import Message
from .model import ModelChunk, ModelRequest
from .records import (  # noqa: F401 (re-exported: the data that crosses the seams)
    FINAL_STATUSES,
    SETTLED_STATUSES,
    CancelReason,
    ChildTurn,
    Commit,
    LoggedEvent,
    Outcome,
    Phase,
    SessionRef,
    SessionStatus,
    TurnInput,
    TurnRecord,
    TurnState,
    TurnStatus,
)


class Tx(Protocol):
    """The writer handed to a unit of work; everything it does commits together."""

    def append(self, message: Message, index: int) -> None:
        """Append ``message`` at transcript position ``index`` (the engine knows it: a turn is
        its session's only writer; the store's uniqueness on position catches a divergence)."""

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        """Memoize a step as done (idempotent on step id)."""

    def emit(self, event: TurnEvent) -> None:
        """Log a durable event; it is published after the commit."""

    def journal(self, phase: Phase, **data: Any) -> None:
        """Record the journal phase on the turn."""

    def boundary(self, index: int, summary_index: int) -> None:
        """Move the session's boundary to transcript position ``index``, with the summary at
        ``summary_index``, in this unit's commit (a turn of an archived generation moves
        nothing). Loads then read the transcript from the boundary only."""

    def settle(
        self,
        status: TurnStatus,
        *,
        text: str = "",
        error: dict[str, Any] | None = None,
        pending: dict[str, Any] | None = None,
        usage: dict[str, int] | None = None,
        waiting: int | None = None,
    ) -> None:
        """Set the turn's status (and the session's). ``waiting`` (a park on what comes back by
        itself: a model's batch, ``loop_model.ModelStep.park``): the turn counts as waiting, as a
        parent on its children does — nobody is asked to answer it, a new turn queues behind it,
        a cancel settles it at once. A child turn settling in a final status
        also, in the same transaction, stores its result under its parent's step (once) and,
        when it was the last child owed, queues the parent again — only while that parent still
        waits on its children (a cancelled or reset parent is never woken); the woken parent is
        in ``Commit.runnable``."""

    def spawn(self, child: ChildTurn) -> None:
        """Create ``child`` as a queued turn (its session too, owned by this turn's session's
        owner), committing with this unit or not at all, and count it as owed to this turn:
        the unit parks the turn on its children (``settle(SUSPENDED)``). A child id that exists
        is left as it is. The child is in ``Commit.runnable``."""


class SessionStore(Protocol):
    """Durable state of sessions and turns. Every change is atomic; the host rules
    (``rules.py``) are applied inside the transaction that makes it."""

    def unwrap(self) -> Any:
        """The backend's handle for tools' transactional writes, or None (in-memory)."""

    async def create_turn(
        self,
        session: SessionRef,
        input: TurnInput,
        *,
        turn_id: str,
        replace: bool = False,
        policy: dict[str, Any] | None = None,
        created_by: Any = None,
    ) -> Outcome:
        """Write a queued turn (atomic, serialized per session) under ``rules.check_start``;
        ``replace`` first cancels every unfinished turn (``rules.cancel_now``). ``created_by``
        is the host's own identity of the caller, kept with the turn (and as a new session's
        owner). Returns the turn and the cancellations it logged."""

    async def get_turn(self, turn_id: str) -> TurnRecord:
        """One turn row; NotFound if absent."""

    async def claim(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
    ) -> TurnRecord | None:
        """Take the lease if the turn is runnable, first in its session's chain, and not held
        by a live lease elsewhere (a conditional update). None if not claimed."""

    async def claim_and_load(
        self,
        turn_id: str,
        *,
        owner: str,
        attempt_id: str,
        now: float,
        lease_seconds: float,
        opening: Callable[[TurnState], Callable[[Tx], None] | None] | None = None,
    ) -> TurnState | None:
        """``claim``, then, if claimed, ``load``: the state of the turn this attempt now holds
        (its ``turn`` is the claimed record). None if not claimed. A store may do both at once
        (one round trip); nothing but the claiming attempt's reads follow its claim.

        ``opening`` (the loop's ``Opening``): a store may call it with the loaded state and, when
        it returns a unit's work, commit that unit (as ``commit`` would, fenced on the claiming
        attempt) in the claim's own transaction, and say so in the state's ``opened``. A store
        that does not, ignores it (``opened`` stays None) and the loop opens the turn itself."""

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        """Extend the lease; returns the cancel reason on the row. StaleAttemptError if lost."""

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        """Give the lease back (the turn is queued again) if this attempt still holds it."""

    async def load(self, turn_id: str) -> TurnState:
        """The turn, the live transcript, its memoized steps and answers: O(1) queries. The
        transcript starts at the session's boundary, or at the turn's opening if that comes
        first (a ``compact:<n>`` step of the turn records it as ``{"opening": …}``): what it
        reads does not grow with the session's age."""

    async def commit(self, turn_id: str, attempt_id: str | None, record: Callable[[Tx], None]) -> Commit:
        """Apply what ``record`` writes through ``tx`` atomically, fenced on ``attempt_id``
        (StaleAttemptError and nothing written if the attempt no longer owns the turn).
        ``record`` only calls ``tx``: it reads and writes nothing else."""

    async def atomic(self, turn_id: str, attempt_id: str | None, work: Callable[[Tx], None]) -> Commit:
        """Like ``commit``, for work that also writes through ``unwrap()`` (a sync tool's own
        rows): those writes commit with the checkpoint or, fenced out or raising, not at all."""

    async def journal(self, turn_id: str, attempt_id: str | None, phase: Phase, **data: Any) -> None:
        """Record a journal phase outside a checkpoint (fenced; advisory). A refused write may
        surface at the attempt's next ``commit``/``atomic`` instead, which refuses it anyway."""

    async def request_cancel(self, turn_id: str, reason: str) -> Outcome:
        """Store a cancel request under ``rules.cancel_now``/``rules.gets_request``: a queued
        turn is cancelled at once (turn.cancelled logged), a running one carries the request."""

    async def answer(self, turn_id: str, input_id: str, answer: Any, record: dict[str, Any]) -> Outcome:
        """Under ``rules.check_resumable`` (re-checked in the transaction): store the answer
        under ``input:<turn_id>:<id>`` with ``record`` (who, via, …) and queue the parked turn
        again, logging ``input.answered`` and ``turn.started(trigger=resume)``."""

    async def resume_parked(self, turn_id: str, reason: str, key: str) -> Outcome | None:
        """Queue again a turn parked on its model's answer ``key`` (``rules.parked_on``: the
        ``ModelParked`` of a batch), logging ``turn.started(trigger=resume)``; None (nothing
        written) when the turn is not parked on it (cancelled meanwhile, or not parked yet)."""

    async def reset(self, session: SessionRef, *, by: Any = None) -> Outcome:
        """Cancel unfinished turns (reason reset, ``rules.cancel_now``), archive the live
        generation (recording ``by``) and go on in a generation number never used before,
        status new. O(1) in the archive's size."""

    async def fork(
        self,
        session: SessionRef,
        input: TurnInput | None,
        *,
        turn_id: str,
        at: int | None = None,
        regenerate: str | None = None,
        policy: dict[str, Any] | None = None,
        created_by: Any = None,
    ) -> Outcome:
        """One transaction, only while the session is idle (``branches.check_idle``): a new
        generation (a number never used before) holding the live one's messages before the fork
        point and the events of their turns (same positions and sequence numbers), with the
        compaction of ``branches.fork_compaction``, made live (``branch.switched`` logged in it),
        and ``input`` queued on it as ``turn_id``. The fork point: message ``at``, or the opening
        of ``regenerate`` (the live branch's last turn a person opened; ``input`` None sends its
        opening again, attachments included). Both under ``branches.check_fork_point``.
        ``Outcome.generation``: the new branch; ``turn``: the queued turn."""

    async def switch(self, session: SessionRef, generation: int) -> Outcome:
        """Make ``generation`` (a branch of the live one's tree) live again with its own
        compaction, only while idle; logs ``branch.switched`` in it. NotFound for a generation
        that is no branch of that tree (a reset's archive is not)."""

    async def pending(self, session: SessionRef) -> list[dict[str, Any]]:
        """The input requests the session is parked on."""

    async def events(self, session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
        """The live generation's logged events after ``after``."""

    async def next_queued(self, session: SessionRef) -> str | None:
        """The first queued turn of the session's chain, if any."""


class EventSink(Protocol):
    """Where events go after they commit (and deltas, live)."""

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        """Publish committed events in order (at-most-once; the log is the truth)."""

    async def delta(self, session: SessionRef, event: TurnEvent) -> None:
        """Publish a live-only delta (may be coalesced)."""


class Model(Protocol):
    """One async streaming call per model step."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """Yield deltas, then exactly one ModelReply; raise ModelError on failure."""
