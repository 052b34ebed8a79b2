"""Writes used by views, consumers, tasks, schedules, webhooks and the admin (keyword-only,
typed): a thin adapter over the runtime's host API (``AgentSession``). A service validates the
transport's input, resolves identity and ownership (who the Django user is, which sessions
they may touch: ``access``), and calls the host API, which applies the rules, asks the store, publishes
and dispatches. Errors are JuneErrors: every transport maps them the same way
(``sessions_app.site_errors``)."""

from __future__ import annotations

import contextvars
import re
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction

from agents_app.runtime import new_turn_id
from agents_app.runtime.errors import NotFound
from agents_app.runtime.seams import CancelReason, LoggedEvent, SessionRef, TurnInput, TurnRecord
from agents_app.runtime.session import AgentSession
from sessions_app import access, quotas, safejson, telemetry, window, wiring
from sessions_app import attachment_services as attach
from sessions_app import models as m
from sessions_app.access import (  # noqa: F401 (re-exported: the transports' one import)
    CHILD_PREFIX,
    SESSION_KEY_RE,
    WEBHOOK_PREFIX,
    session_for_user,
    session_to_open,
    user_identity,
    validate_session_key,
    webhook_session_key,
)
from sessions_app.outbox.queue import enqueue_head, ring_on_commit
from sessions_app.site_errors import AccessDenied, BadRequest, NotSessionOwner, PayloadTooLarge
from sessions_app.store import host_ops
from sessions_app.store.batch_model import REASON as BATCH_REASON
from sessions_app.store.threads import run_here

INPUT_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}")


# -- publishing (for the sweeper, which settles turns outside the host API) ------------------------


def publish_on_commit(ref: SessionRef, events: Sequence[LoggedEvent]) -> None:
    if not events:
        return
    sink = wiring.sink()
    transaction.on_commit(lambda: async_to_sync(sink.publish)(ref, list(events)))


# -- turns ------------------------------------------------------------------------------------------


def validate_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("text must be a non-empty string")
    if len(text) > settings.JUNE_MAX_TEXT_CHARS:
        raise PayloadTooLarge(f"text is longer than {settings.JUNE_MAX_TEXT_CHARS} characters")
    return safejson.check_string(text)  # NUL, lone surrogates: also from callers that parsed no JSON


class AfterCall:
    """The host API's Dispatcher for one service call: the turns it dispatches and the running
    turns it rings are handed to django-q2 and the cancel doorbell when the call has returned,
    on this thread, after the commit (django-q2's sync mode would otherwise run the turn
    inside the call's event loop)."""

    def __init__(self) -> None:
        self.turns: list[str] = []
        self.rings: list[str] = []

    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        self.turns.append(turn_id)

    async def ring(self, turn_ids: Sequence[str]) -> None:
        self.rings += turn_ids

    def flush(self) -> None:
        ring_on_commit(self.rings)
        for turn_id in self.turns:
            enqueue_head(turn_id)  # a turn behind another gets its task from the chain's hand-off


T = TypeVar("T")


def _host_call(agent: str, key: str, operation: Callable[[AgentSession], Awaitable[T]], *, inline: bool = False) -> T:
    """Call the runtime's host API (``operation`` of the session's ``AgentSession``; the rules
    live there), on Django's connection of this thread: inside the caller's transaction, if one
    is open.

    ``inline``: the call awaits nothing but the store's database calls (a start without a
    replace logs no event to publish), so it runs here, with no event loop (``run_here``).
    Otherwise ``async_to_sync`` runs it on an event loop (under daphne the server's own, which
    every connection's I/O waits for), and each database call hops back to this thread."""
    dispatcher = AfterCall()
    host = wiring.runtime(dispatcher=dispatcher, own_connection=False, inline=inline).session(agent, key)

    async def call() -> T:
        return await operation(host)

    try:
        if inline:
            return contextvars.copy_context().run(run_here, call())
        # in a copy of the caller's context: asgiref copies the call's context variables back
        # into the caller's, and a call from a thread with no event loop (a django-q2 task, a
        # WSGI server) runs on a new thread each time, whose Django connection handle adds a
        # variable of its own there: the caller's context grew by one per call, for good, and
        # every later sync/async hop on its thread copied them all
        return contextvars.copy_context().run(async_to_sync(call))
    finally:
        dispatcher.flush()


def _user_row(user: Any) -> Any:
    return user if getattr(user, "pk", None) else None


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
    attachments: list[str] | None = None,
    instructions: str | None = None,
) -> TurnRecord:
    """Queue a turn (after access checks); a worker picks it up after the commit.

    Admitted first (``quotas.admit_turn``: the user's, or the webhook's, rate and the day's token
    quotas): a refusal raises ``RateLimited`` before anything is created, the session included;
    a start counted whose creation is then refused (access, a parked session) is given back.
    ``attachments``: ids of the user's unsent uploads to this session (``sessions_app.attachment_services``);
    the turn takes them, and a refused start gives them back. With attachments the text may be empty.
    ``instructions``: the turn's system prompt instead of the agent's (an eval's other version)."""
    ids = attach.parse_ids(attachments if attachments is not None else [])
    text = "" if ids and isinstance(text, str) and not text.strip() else validate_text(text)
    turn_id = turn_id or new_turn_id()
    wiring.agent(agent)
    # a person has taken the session over (``takeover``): no turn starts until they hand it back;
    # the store checks it with the start's other rules, in the statement that creates the turn
    window.check_fits(agent, text)  # before admission: a refused message costs no quota
    row = _user_row(user)
    admitted = quotas.admit_turn(agent=agent, user_id=row.pk if row else None, source=source)
    try:
        # a user's own session: checked by the creation itself (no read before it), except for
        # keys a channel owns, and a start with attachments (the session's refusal comes first)
        if user is not None and (ids or not access.start_checked_by_store(agent=agent, key=key, user=user)):
            session_for_user(agent=agent, key=key, user=user, create=True)
        files = attach.attachments_take(agent=agent, key=key, user=user, ids=ids, turn_id=turn_id)
        # the request's span (traces on): the turn's spans, in the worker, continue its trace
        with telemetry.request(f"turn_start {source}", **{"june.turn.source": source, "gen_ai.agent.name": agent}):
            turn_input = TurnInput(
                text=text,
                kind=kind,
                by=by,
                source=source,
                user=speaker if speaker is not None else user_identity(user, attested=attested),
                target=target,
                trace=telemetry.traceparent(),  # carried durably with the turn
                attachments=files,
            )
            try:
                return _host_call(
                    agent,
                    key,
                    lambda host: host.start_turn(
                        turn_input, replace=replace, turn_id=turn_id, created_by=row, instructions=instructions
                    ),
                    inline=not replace,  # a replace publishes the cancels it logged: the event loop's
                )
            except NotSessionOwner:
                raise access.refused_start(agent=agent, key=key, user=user) from None
    except BaseException:
        admitted.refund()
        if ids:
            attach.attachments_release(turn_id=turn_id)
        raise


def _turn_in(*, turn_id: str, agent: str | None = None, key: str | None = None, user: Any = None) -> m.Turn:
    turn = m.Turn.objects.select_related("session").filter(pk=turn_id).first()
    if turn is None or (agent is not None and (turn.session.agent, turn.session.key) != (agent, key)):
        raise NotFound("this conversation has no such message or reply: reload the page")
    if user is not None:
        session_for_user(agent=turn.session.agent, key=turn.session.key, user=user)
    return turn


def turn_cancel(
    *,
    turn_id: str,
    agent: str | None = None,
    key: str | None = None,
    user: Any = None,
    reason: str = CancelReason.REQUESTED,
) -> TurnRecord:
    turn = _turn_in(turn_id=turn_id, agent=agent, key=key, user=user)
    return _host_call(turn.session.agent, turn.session.key, lambda host: host.cancel(turn_id, reason=str(reason)))


def session_reset(*, agent: str, key: str, user: Any = None) -> dict[str, Any]:
    """A user's reset counts in their rate (``quotas.admit_reset``): refused (``RateLimited``)
    before anything is created, given back when the reset itself is refused."""
    if user is None:
        return _host_call(agent, key, lambda host: host.reset(by=None))
    wiring.agent(agent)  # an unknown agent is a 404, not a counted reset
    admitted = quotas.admit_reset(user_id=user.pk)
    try:
        session_for_user(agent=agent, key=key, user=user, create=True)
        return _host_call(agent, key, lambda host: host.reset(by=_user_row(user)))
    except BaseException:
        admitted.refund()
        raise


# -- branches: edit an earlier message, regenerate the last reply, switch ------------------------------


def _owned(agent: str, key: str, user: Any) -> m.Session:
    session = session_for_user(agent=agent, key=key, user=user)
    if session is None:
        raise NotFound(f"no session {key}")
    return session


def _new_branch(
    agent: str,
    key: str,
    user: Any,
    source: str,
    ids: list[str],
    turn_id: str,
    start: Callable[[AgentSession, tuple[dict[str, Any], ...]], Awaitable[TurnRecord]],
) -> TurnRecord:
    """A turn that opens a new branch, admitted and given back on a refusal as ``turn_start``'s."""
    _owned(agent, key, user)
    row = _user_row(user)
    admitted = quotas.admit_turn(agent=agent, user_id=row.pk if row else None, source=source)
    try:
        files = attach.attachments_take(agent=agent, key=key, user=user, ids=ids, turn_id=turn_id) if ids else ()
        with telemetry.request(f"branch {source}", **{"june.turn.source": source, "gen_ai.agent.name": agent}):
            return _host_call(agent, key, lambda host: start(host, files))
    except BaseException:
        admitted.refund()
        if ids:
            attach.attachments_release(turn_id=turn_id)
        raise


def branch_fork(
    *, agent: str, key: str, at: int, text: str, user: Any, source: str = "web", attachments: list[str] | None = None
) -> TurnRecord:
    """Edit the person's message at position ``at``: a new branch from just before it, live,
    whose first turn sends ``text`` (and ``attachments``, ids of unsent uploads). Owner only;
    409 unless the session is idle; 422 unless ``at`` opened a turn of the live branch."""
    ids = attach.parse_ids(attachments if attachments is not None else [])
    text = "" if ids and isinstance(text, str) and not text.strip() else validate_text(text)
    wiring.agent(agent)
    window.check_fits(agent, text)
    turn_id, row = new_turn_id(), _user_row(user)
    return _new_branch(
        agent,
        key,
        user,
        source,
        ids,
        turn_id,
        lambda host, files: host.fork(
            at,
            TurnInput(
                text=text, source=source, user=user_identity(user), trace=telemetry.traceparent(), attachments=files
            ),
            turn_id=turn_id,
            created_by=row,
        ),
    )


def turn_regenerate(*, agent: str, key: str, turn_id: str, user: Any, source: str = "web") -> TurnRecord:
    """The live branch's last turn sent again as the first turn of a new branch (the reply it
    had stays on the branch left). Owner only; 409 unless idle and ``turn_id`` is that turn."""
    wiring.agent(agent)
    new_id, row = new_turn_id(), _user_row(user)
    return _new_branch(
        agent,
        key,
        user,
        source,
        [],
        new_id,
        lambda host, files: host.regenerate(turn_id, new_turn_id=new_id, source=source, created_by=row),
    )


def branch_switch(*, agent: str, key: str, generation: int, user: Any) -> int:
    """Make another branch of the conversation live. Owner only; 409 unless idle."""
    _owned(agent, key, user)
    return _host_call(agent, key, lambda host: host.switch_branch(generation))


# -- human in the loop --------------------------------------------------------------------------------


def _answerer(user: Any, by: str | None) -> tuple[str | None, dict[str, Any] | None]:
    who = by if by is not None else (str(user.pk) if getattr(user, "pk", None) else None)
    principal = {"user_id": user.pk, "username": user.get_username()} if getattr(user, "pk", None) else None
    return who, principal


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
    if not isinstance(input_id, str) or not INPUT_ID_RE.fullmatch(input_id):
        raise BadRequest("input_id must be a short identifier")
    turn = _turn_in(turn_id=turn_id, agent=agent, key=key, user=user if check_session_access else None)
    who, principal = _answerer(user, by)
    row = _user_row(user)
    record = {
        "name": row.get_username() if row else None,
        "user_id": row.pk if row else None,
        "remote_addr": remote_addr,
    }
    return _host_call(
        turn.session.agent,
        turn.session.key,
        lambda host: host.resume(turn_id, input_id, answer, by=who, principal=principal, via=via, record=record),
    )


def may_answer(*, turn: m.Turn, user: Any, request: dict[str, Any] | None = None) -> bool:
    """Whether ``user`` may answer the turn's parked request (``request``: one of several it
    waits on; default the first) — for listing the inbox: ``AgentSession.may_answer``, the
    path ``turn_resume`` takes, with the agent's grant evaluated now, on this thread."""
    who, principal = _answerer(user, None)
    if request is None:
        request = (turn.pending or {}).get("request") or {}
    try:
        return _host_call(
            turn.session.agent, turn.session.key, lambda host: host.may_answer(request, by=who, principal=principal)
        )
    except NotFound:  # its agent is gone from the site: nobody answers it here
        return False


# -- a session's title (the chat header's Rename) -------------------------------------------


def session_rename(*, agent: str, key: str, user: Any, title: Any) -> m.Session:
    """Set the session's title (blank: back to its first message). Owner only (AccessDenied)."""
    if not isinstance(title, str) or len(title) > 200:
        raise BadRequest("a title is a string of at most 200 characters")
    safejson.check_string(title)  # NUL, lone surrogates: whatever transport it came from
    session = session_for_user(agent=agent, key=key, user=user, create=True)  # a new chat's too
    if session is None:  # created when absent: only a user with no login gets none
        raise AccessDenied("log in to rename a session")
    title = " ".join(title.split())
    m.Session.objects.filter(pk=session.pk).update(title=title)
    session.title = title
    return session


# -- Message Batches (``workers.batch_poller``) ------------------------------------------------------


def batch_answered(turn_id: str, key: str) -> bool:
    """Queue again a turn parked on its batch's answer ``key`` (``store.batch_model``), its
    events published and its task enqueued after the commit. False, nothing written, when the
    turn is not parked on it."""
    outcome = host_ops.resume_parked(turn_id, BATCH_REASON, key)
    if outcome is None or outcome.turn is None:
        return False
    publish_on_commit(outcome.turn.session, outcome.events)
    enqueue_head(turn_id)
    return True
