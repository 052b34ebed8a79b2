"""The host's rules, once: when a turn may start, what cancel, replace and reset do to each
turn, and when a parked turn may be answered. Pure functions and constants over records.

Every store applies them inside the transaction that makes its change (the in-memory store
and the Django store alike), and ``AgentSession`` checks them before it asks the store, so
the site and the unit tests run this code and no copy of it.
"""

from __future__ import annotations

from typing import Any

from .answers import Grant, check_answer_schema, check_answerer
from .errors import NotFound, SessionSuspendedError, SessionTakenOverError, TurnConflictError, TurnNotResumable
from .seams import CancelReason, SessionRef, TurnRecord, TurnStatus

#: the statuses that keep a session's chain waiting (a later turn starts after them)
CHAIN_BLOCKING = frozenset({TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.SUSPENDED})
#: cancelled at once by a request (nothing runs them); a running turn gets the request instead
CANCEL_AT_ONCE = frozenset({TurnStatus.QUEUED})
#: a reset also cancels the session's parked turn (a stale park is archived with its generation)
CANCEL_AT_ONCE_ON_RESET = CANCEL_AT_ONCE | {TurnStatus.SUSPENDED}
#: these carry the request until their next checkpoint or heartbeat honours it
CANCEL_REQUESTED = frozenset({TurnStatus.RUNNING})
#: a turn parked on its children (``waiting``) holds no worker: any cancel settles it at once
CANCEL_AT_ONCE_WAITING = frozenset({TurnStatus.SUSPENDED})
#: the reason a cancel hands down to the unfinished children of every turn it cancels, at
#: once or by request (the children of those children likewise); it settles a queued or parked
#: child at once, a running one at its next boundary
CASCADE = CancelReason.PARENT
#: The retry budget (``attempts`` against max_attempts) counts the attempts that ended without
#: settling: a crash, a lost lease, a retryable failure. Every claim counts its attempt; the
#: unit that parks the turn (it settled, waiting for an answer) gives it back, so a tool that
#: asks five questions does not exhaust the budget. A final status keeps its count (nothing
#: retries it; ``attempts`` then says how many attempts the turn took).
REFUNDS_ATTEMPT = frozenset({TurnStatus.SUSPENDED})


def attempts_after(attempts: int, status: TurnStatus | str | None) -> int:
    """``attempts`` after a unit that sets ``status`` commits (``REFUNDS_ATTEMPT``)."""
    return max(attempts - 1, 0) if status in REFUNDS_ATTEMPT else attempts


def check_start(*, turn_exists: bool, parked: bool, taken_over: bool = False) -> None:
    """A turn id is used once; no turn starts while a person has the session
    (``check_not_taken_over``); one park per session: while the live generation has a suspended
    turn, other turns are refused (answer it or reset the session). Replace never cancels a
    parked approval, because a parked session starts nothing. A turn parked on its children
    (``waiting``) is not a park here: a new turn queues behind it, a replace cancels it. The
    store reads the facts under the session's lock, in the statement that creates the turn."""
    if turn_exists:
        raise TurnConflictError("this turn id exists")
    check_not_taken_over(taken_over=taken_over)
    if parked:
        raise SessionSuspendedError("the session is waiting for an answer; answer it or reset the session")


def check_not_taken_over(*, taken_over: bool) -> None:
    """While a person has taken a session over, no turn starts in it: a person's message goes
    to them (the host's takeover), a proactive or programmatic start is refused until the hand
    back. The store applies it with ``check_start`` (a start, a fork, a regenerate), under the
    session's lock: a takeover that begins meanwhile is seen."""
    if taken_over:
        raise SessionTakenOverError("a person has taken this conversation over: no turn starts until they hand it back")


def cancel_now(status: TurnStatus, *, reason: str, waiting: int = 0) -> bool:
    """Whether a cancel with ``reason`` settles a turn in ``status`` at once (``waiting``: the
    children it is parked on)."""
    if waiting and status in CANCEL_AT_ONCE_WAITING:
        return True
    at_once = CANCEL_AT_ONCE_ON_RESET if reason in (CancelReason.RESET, CASCADE) else CANCEL_AT_ONCE
    return status in at_once


def check_cancellable(rec: TurnRecord) -> None:
    """What a person's cancel may ask, the same over every transport (409s otherwise): a queued
    or running turn, a turn parked on its children (cancelled at once, with them: ``cancel_now``),
    a cancelled one again (nothing more happens). A turn parked on an answer is answered or its
    session reset — its cancel would throw the question away — and a finished turn stays as it
    ended."""
    if rec.status in (TurnStatus.COMPLETED, TurnStatus.FAILED):
        raise TurnConflictError(f"the turn has already {rec.status}")
    if rec.status == TurnStatus.SUSPENDED and not rec.waiting:
        raise TurnConflictError("the turn is waiting for an answer: answer it, or reset the session")


def gets_request(rec: TurnRecord) -> bool:
    """Whether a running turn is handed the cancel request (the first request wins)."""
    return rec.status in CANCEL_REQUESTED and not rec.cancel_reason


def check_turn_of(rec: TurnRecord, session: SessionRef) -> None:
    if rec.session != session:
        raise NotFound("this conversation has no such message or reply: reload the page")


def pending_requests(pending: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The requests a parked turn waits on, oldest call first: several when one model step made
    parallel calls that each need approval (all shown at once, answered in any order)."""
    if not pending:
        return []
    many = pending.get("requests")
    if isinstance(many, list) and many:
        return [r for r in many if isinstance(r, dict)]
    one = pending.get("request")
    return [one] if isinstance(one, dict) else []


def after_answer(pending: dict[str, Any], input_id: str) -> dict[str, Any] | None:
    """What a parked turn still waits on once ``input_id`` is answered: None when nothing (the
    turn resumes), else its pending with that request taken out (the turn stays parked)."""
    rest = [r for r in pending_requests(pending) if r.get("id") != input_id]
    if not rest:
        return None
    return {**pending, "request": rest[0], "requests": rest}


# what a person answering a request is told when it cannot be answered (a card in the chat, the
# admin's answer page, the API): what was refused and what to do, never a turn's raw id
NOT_WAITING = (
    "Nothing waits for this answer any more: it was answered, or the reply it was for ended. Reload to see how."
)
ARCHIVED = "This request was in a part of the conversation since reset or replaced by another branch: it can no longer be answered."
OTHER_REQUEST = "This answer is for a request the reply no longer waits on: reload to see the open request."


def check_resumable(rec: TurnRecord, *, input_id: str, generation: int | None = None) -> dict[str, Any]:
    """The pending request of a turn that may be answered with ``input_id`` (409s otherwise):
    parked, in the session's live generation, on that input (one of its inputs, when a step's
    parallel calls each wait for an approval)."""
    if rec.status != TurnStatus.SUSPENDED or not rec.pending:
        raise TurnNotResumable(NOT_WAITING)
    if generation is not None and rec.generation != generation:
        raise TurnNotResumable(ARCHIVED)
    owed = pending_requests(rec.pending)
    for request in owed:
        if request.get("id") == input_id:
            return request
    raise TurnConflictError(OTHER_REQUEST)


def needs_grant(request: dict[str, Any]) -> bool:
    return "policy" in (request.get("answerers") or {})


def check_answer(request: dict[str, Any], answer: Any, *, by: str | None, granted: Grant | None) -> None:
    """403 unless ``by``/``granted`` is an allowed answerer; 422 unless the answer fits the schema."""
    check_answerer(request, by=by, granted=granted)
    check_answer_schema(request, answer)


def parked_on_model(turn: TurnRecord) -> bool:
    """Is ``turn`` parked on its model's answer to come (any ``ModelParked`` reason)? It holds
    no worker and waits for no person (``waiting``), yet it has settled for now: a caller of
    ``result()`` hears it suspended (a schedule's firing worker does not wait a day)."""
    return turn.status == TurnStatus.SUSPENDED and bool((turn.pending or {}).get("reason"))


def parked_on(turn: TurnRecord, reason: str, key: str) -> bool:
    """Is ``turn`` parked on its model's answer ``key`` (``loop_model.ModelStep.park``: a
    batch's request)? Only then may ``SessionStore.resume_parked`` queue it again."""
    pending = turn.pending or {}
    return (
        turn.status == TurnStatus.SUSPENDED
        and pending.get("reason") == reason
        and (pending.get(reason) or {}).get("key") == key
    )
