"""Writes used by views, consumers, tasks and the admin (keyword-only, typed).

Each service validates, calls the store (which opens the transaction), and enqueues or
publishes after the commit. Errors are JuneErrors: every transport maps them the same way
(``sessions_app.errors``)."""

from __future__ import annotations

import re
import uuid
from typing import Any, Sequence

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction

from agents_app.runtime import answers
from agents_app.runtime.errors import NotFound, TurnConflictError, TurnNotResumable
from agents_app.runtime.seams import (
    CancelReason,
    LoggedEvent,
    SessionRef,
    TurnInput,
    TurnRecord,
    TurnStatus,
)

from sessions_app import models as m
from sessions_app import wiring
from sessions_app.errors import AccessDenied, BadRequest, PayloadTooLarge
from sessions_app.outbox.doorbell import ring
from sessions_app.outbox.queue import enqueue_turn

SESSION_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}$")
INPUT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")


# -- access -------------------------------------------------------------------------------------

def user_identity(user: Any, *, attested: bool = True) -> dict[str, Any] | None:
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return {"id": str(user.pk), "name": user.get_username(), "attested": attested}


def validate_session_key(key: str) -> str:
    if not isinstance(key, str) or not SESSION_KEY_RE.match(key):
        raise BadRequest("a session key is 1-200 characters: letters, digits and _ . : @ -")
    return key


def session_for_user(*, agent: str, key: str, user: Any, create: bool = False) -> m.Session | None:
    """The session if ``user`` may see it (its owner; staff see every session in the admin,
    not here). Creates it, owned by ``user``, when ``create`` and absent. AccessDenied for a
    session of someone else."""
    wiring.agent(agent)  # NotFound for an unknown agent
    validate_session_key(key)
    session = m.Session.objects.filter(agent=agent, key=key).first()
    if session is None:
        if not create:
            return None
        session, _ = m.Session.objects.get_or_create(agent=agent, key=key, defaults={"owner": user})
    if session.owner_id is not None and session.owner_id != getattr(user, "pk", None):
        raise AccessDenied("this session belongs to another user")
    if session.owner_id is None and not getattr(user, "is_staff", False):
        raise AccessDenied("this session has no owner; only staff may open it")
    return session


# -- publishing -----------------------------------------------------------------------------------

def publish_on_commit(ref: SessionRef, events: Sequence[LoggedEvent]) -> None:
    if not events:
        return
    sink = wiring.sink()
    transaction.on_commit(lambda: async_to_sync(sink.publish)(ref, list(events)))


def signal_cancel_on_commit(turn_ids: Sequence[str]) -> None:
    """A live signal that makes a cancel reach a running worker promptly (the request itself
    is a row, honoured at the next commit or heartbeat even if the signal is lost)."""
    ids = list(turn_ids)
    if ids:
        transaction.on_commit(lambda: ring(ids))


# -- turns ------------------------------------------------------------------------------------------

def validate_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("text must be a non-empty string")
    if len(text) > settings.JUNE_MAX_TEXT_CHARS:
        raise PayloadTooLarge(f"text is longer than {settings.JUNE_MAX_TEXT_CHARS} characters")
    return text


def turn_start(
    *,
    agent: str,
    key: str,
    text: str,
    user: Any = None,
    source: str = "web",
    replace: bool = False,
    kind: str = "inbound",
    by: str | None = None,
    target: dict[str, Any] | None = None,
    attested: bool = True,
    speaker: dict[str, Any] | None = None,
    turn_id: str | None = None,
) -> TurnRecord:
    """Queue a turn (after access checks) and enqueue it for a worker after the commit."""
    text = validate_text(text)
    definition = wiring.agent(agent)
    if user is not None:
        session_for_user(agent=agent, key=key, user=user, create=True)
    turn_input = TurnInput(
        text=text, kind=kind, by=by, source=source,
        user=speaker if speaker is not None else user_identity(user, attested=attested), target=target,
    )
    store = wiring.store()
    ref = SessionRef(agent, key)
    with transaction.atomic():
        rec, logged = store.create_turn_logged(
            ref, turn_input, turn_id=turn_id or uuid.uuid4().hex, replace=replace,
            policy=definition.policy_for(source), created_by=user if getattr(user, "pk", None) else None,
        )
        # read under the session lock the store took: a turn claimed a moment before is included
        running = _running_turns(agent, key) if replace else []
        publish_on_commit(ref, logged)
        signal_cancel_on_commit(running)
        enqueue_turn(rec.turn_id)
    return rec


def _running_turns(agent: str, key: str) -> list[str]:
    return list(m.Turn.objects.filter(session__agent=agent, session__key=key, status=TurnStatus.RUNNING)
                .values_list("id", flat=True))


def _turn_in(*, turn_id: str, agent: str | None = None, key: str | None = None, user: Any = None) -> m.Turn:
    turn = m.Turn.objects.select_related("session").filter(pk=turn_id).first()
    if turn is None or (agent is not None and (turn.session.agent, turn.session.key) != (agent, key)):
        raise NotFound(f"no turn {turn_id} in this session")
    if user is not None:
        session_for_user(agent=turn.session.agent, key=turn.session.key, user=user)
    return turn


def turn_cancel(*, turn_id: str, agent: str | None = None, key: str | None = None, user: Any = None,
                reason: str = CancelReason.REQUESTED) -> TurnRecord:
    turn = _turn_in(turn_id=turn_id, agent=agent, key=key, user=user)
    store = wiring.store()
    with transaction.atomic():
        rec, logged = store.request_cancel_sync(turn_id, str(reason))
        publish_on_commit(rec.session, logged)
        if rec.status == TurnStatus.RUNNING:
            signal_cancel_on_commit([turn_id])
        elif rec.status == TurnStatus.CANCELLED:
            _enqueue_next_txn(rec.session)
    del turn
    return rec


def session_reset(*, agent: str, key: str, user: Any = None) -> dict[str, Any]:
    if user is not None:
        session_for_user(agent=agent, key=key, user=user, create=True)
    store = wiring.store()
    ref = SessionRef(agent, key)
    with transaction.atomic():
        previous, generation, logged = store.reset_sync(ref, by=user if getattr(user, "pk", None) else None)
        running = _running_turns(agent, key)  # under the session lock: every turn that got the request
        publish_on_commit(ref, logged)
        signal_cancel_on_commit(running)
        _enqueue_next_txn(ref)
    return {"previous_session": previous, "generation": generation}


def _enqueue_next_txn(ref: SessionRef) -> None:
    nxt = wiring.store().next_queued_sync(ref)
    if nxt:
        enqueue_turn(nxt)


# -- human in the loop --------------------------------------------------------------------------------

def grant_for(*, turn: m.Turn, by: str | None, principal: Any) -> answers.Grant | None:
    """Evaluate the agent's ``authorize_answer`` now, on this thread (it may read the database)."""
    hook = wiring.agent(turn.session.agent).authorize_answer
    return answers.grant_answer_sync(turn.pending or {}, {"by": by, "principal": principal}, hook,
                                     run_awaitable=lambda aw: async_to_sync(_await)(aw))


async def _await(x: Any) -> Any:
    return await x


def turn_resume(
    *,
    turn_id: str,
    input_id: str,
    answer: Any,
    user: Any = None,
    agent: str | None = None,
    key: str | None = None,
    via: str = "api",
    remote_addr: str = "",
    by: str | None = None,
    check_session_access: bool = True,
) -> TurnRecord:
    """Answer a parked request: 403 (not an allowed answerer), 409 (wrong turn/input or not
    parked), 422 (answer fails the schema), 500 (authorize_answer raised; nothing applied)."""
    if not isinstance(input_id, str) or not INPUT_ID_RE.match(input_id):
        raise BadRequest("input_id must be a short identifier")
    turn = _turn_in(turn_id=turn_id, agent=agent, key=key, user=user if check_session_access else None)
    if turn.status != TurnStatus.SUSPENDED or not turn.pending or turn.generation != turn.session.generation:
        raise TurnNotResumable(f"turn {turn_id} is not waiting for an answer")
    request = turn.pending.get("request") or {}
    if request.get("id") != input_id:
        raise TurnConflictError(f"turn {turn_id} is waiting for {request.get('id')!r}, not {input_id!r}")
    who = by if by is not None else (str(user.pk) if getattr(user, "pk", None) else None)
    principal = {"user_id": user.pk, "username": user.get_username()} if getattr(user, "pk", None) else None
    granted = grant_for(turn=turn, by=who, principal=principal) if "policy" in (request.get("answerers") or {}) else None
    answers.check_answerer(request, by=who, granted=granted)
    answers.check_answer_schema(request, answer)
    store = wiring.store()
    with transaction.atomic():
        rec, logged = store.answer_sync(
            turn_id, input_id, answer,
            {"by": who, "via": via, "name": user.get_username() if getattr(user, "pk", None) else None},
            user=user if getattr(user, "pk", None) else None, remote_addr=remote_addr,
        )
        publish_on_commit(rec.session, logged)
        enqueue_turn(turn_id)
    return rec


def may_answer(*, turn: m.Turn, user: Any) -> bool:
    """Whether ``user`` may answer the turn's parked request (for listing the inbox)."""
    request = (turn.pending or {}).get("request") or {}
    who = str(user.pk)
    principal = {"user_id": user.pk, "username": user.get_username()}
    try:
        granted = grant_for(turn=turn, by=who, principal=principal) if "policy" in (request.get("answerers") or {}) else None
    except Exception:
        return False
    return answers.may_answer(turn.pending or {}, by=who, granted=granted)


# -- issue 17: a session's title (the chat header's Rename) -------------------------------------------

def session_rename(*, agent: str, key: str, user: Any, title: Any) -> m.Session:
    """Set the session's title (blank: back to its first message). Owner only (AccessDenied)."""
    if not isinstance(title, str) or len(title) > 200:
        raise BadRequest("a title is a string of at most 200 characters")
    session = session_for_user(agent=agent, key=key, user=user)
    if session is None:
        raise NotFound(f"no session {key!r} of agent {agent!r}")
    title = " ".join(title.split())
    m.Session.objects.filter(pk=session.pk).update(title=title)
    session.title = title
    return session
