"""A person takes a conversation over and hands it back (docs/operations.md "Takeover").

While a session is taken over (an open ``Takeover`` row), no turn starts in it
(``rules.check_start``'s ``taken_over``, read by the store under the session's lock in the
statement that creates a turn: a start, an edit, a Regenerate): what its user writes goes
to the person (``user_says``), and the person answers (``person_says``). Both go to the event
log at once (``person.message``: the chat shows them live and after a reload) and join the
transcript at the hand back, in their order between two notes (a reply the operator let finish
may still be writing the transcript until then; the hand back waits for it), so the archive
keeps them and the model reads them:

- the user's messages are ``user`` messages;
- the person's are ``assistant`` messages marked ``by = "person:<name>"``;
- the takeover and the hand back are ``trigger`` notes (``by = "takeover"``), which the model
  reads as user text: "a person, <name>, took over … the replies until the hand back are theirs".

Everything is in the database (a restart changes nothing); the partial unique constraint on an
open row refuses a second operator (409). Each step writes its audit row.
"""

from __future__ import annotations

import inspect
from typing import Any

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents_app.runtime import events as ev
from agents_app.runtime.errors import TurnConflictError
from agents_app.runtime.messages import Message, Role
from agents_app.runtime.seams import SessionRef
from sessions_app import attachment_services as attach
from sessions_app import audit, services, wiring
from sessions_app import models as m
from sessions_app.site_errors import AccessDenied, BadRequest
from sessions_app.store.host_ops import log_txn

NOTE_BY, PERSON_PREFIX = m.NOTE_BY, m.PERSON_PREFIX


def display_name(user: Any) -> str:
    full = (getattr(user, "get_full_name", lambda: "")() or "").strip()
    return (full or user.get_username())[:150]


def open_takeover(session: m.Session) -> m.Takeover | None:
    return m.Takeover.objects.filter(session=session, ended_at__isnull=True).select_related("operator").first()


def may_take_over(*, session: m.Session, user: Any) -> bool:
    """The agent's ``authorize_takeover`` grants it to ``user`` (an active staff member), now."""
    if user is None or not (user.is_active and user.is_staff):
        return False
    decide = wiring.agent(session.agent).authorize_takeover
    if decide is None:
        return False
    result = decide(
        session={"agent": session.agent, "key": session.key, "owner_id": session.owner_id},
        principal={"user_id": user.pk, "username": user.get_username()},
    )
    if inspect.isawaitable(result):
        result = async_to_sync(lambda: result)()
    return result is True


def _append_txn(session: m.Session, message: Message) -> int:
    """Append ``message`` to the live generation (the session row locked); its position."""
    last = (
        m.Message.objects.filter(session_id=session.pk, generation=session.generation)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
    )
    index = 0 if last is None else last + 1
    m.Message.objects.create(
        session_id=session.pk,
        generation=session.generation,
        index=index,
        turn_id=None,
        role=str(message.role),
        data=_row(message),
    )
    return index


def _row(message: Message) -> dict[str, Any]:
    data = message.to_json()
    del data["role"]
    return data


def _locked(session_id: int) -> m.Session:
    return m.Session.objects.select_for_update().get(pk=session_id)


def _publish(session: m.Session, logged: list[Any]) -> None:
    services.publish_on_commit(SessionRef(session.agent, session.key), logged)


def takeover_begin(*, session: m.Session, user: Any, running: str = "cancel", request: Any = None) -> m.Takeover:
    """``user`` takes ``session`` over. ``running``: ``cancel`` the turn running now (and the
    queued ones), or let it ``finish``. AccessDenied (403) without the agent's grant;
    TurnConflictError (409) when someone has it already."""
    if running not in m.TakeoverRunning.values:
        raise BadRequest("running must be 'cancel' or 'finish'")
    if not may_take_over(session=session, user=user):
        raise AccessDenied("the agent's authorize_takeover does not let you take this session over")
    name = display_name(user)
    try:
        with transaction.atomic():
            s = _locked(session.pk)
            row = m.Takeover.objects.create(
                session=s, generation=s.generation, operator=user, operator_name=name, running=running
            )
            _publish(s, log_txn(s.pk, [ev.TakeoverStarted("", by=name, running=running)], turn_id=None))
    except IntegrityError:
        holder = open_takeover(session)
        raise TurnConflictError(
            f"{holder.operator_name if holder else 'another operator'} has taken this session over already"
        ) from None
    if running == m.TakeoverRunning.CANCEL:
        for turn_id in m.Turn.objects.filter(
            session=session, status__in=(m.TurnStatus.QUEUED, m.TurnStatus.RUNNING)
        ).values_list("pk", flat=True):
            try:
                services.turn_cancel(turn_id=turn_id)
            except TurnConflictError:
                pass  # it ended meanwhile
    audit.audit_record(
        action=m.AuditAction.TAKEOVER, user=user, request=request, session=session, detail={"running": running}
    )
    return row


def _say_txn(session_id: int, kind: str, text: str, shown_as: str, *, user: Any = None, ids: Any = ()) -> int:
    """Log one message of the takeover (the event log only: a reply the operator let finish may
    still be writing the transcript; the messages join it at the hand back); its event's seq.
    ``ids``: the user's unsent uploads to the session the message carries (marked sent)."""
    s = _locked(session_id)
    row = m.Takeover.objects.filter(session=s, ended_at__isnull=True).first()
    if row is None:
        raise TurnConflictError("this session is not taken over (any more)")
    files = attach.attachments_take(
        agent=s.agent, key=s.key, user=user, ids=list(ids), turn_id=m.takeover_files_mark(row.pk)
    )
    m.Takeover.objects.filter(pk=row.pk).update(messages=row.messages + 1)
    said = ev.PersonMessage("", role=kind, text=text, by=shown_as, attachments=files)
    logged = log_txn(s.pk, [said], turn_id=None)
    _publish(s, logged)
    return logged[0].seq if logged else 0


def person_says(*, session: m.Session, user: Any, text: Any) -> int:
    """The operator holding the takeover writes to the user; its event's seq."""
    text = services.validate_text(text)
    row = open_takeover(session)
    if row is None or row.operator_id != user.pk:
        raise AccessDenied("only the operator who took this session over writes in it")
    with transaction.atomic():
        return _say_txn(session.pk, "person", text, row.operator_name)


def user_says(*, session: m.Session, user: Any, text: Any, attachments: Any = None) -> int | None:
    """The session's owner writes while it is taken over: the message, and the files it carries
    (``attachments``: ids of their unsent uploads, as a start takes them), go to the person (its
    event's seq); None when it is not taken over (the caller starts a turn as usual)."""
    if not m.Takeover.objects.filter(session=session, ended_at__isnull=True).exists():
        return None
    ids = attach.parse_ids(attachments if attachments is not None else [])
    text = "" if ids and isinstance(text, str) and not text.strip() else services.validate_text(text)
    try:
        with transaction.atomic():
            return _say_txn(session.pk, "user", text, user.get_username(), user=user, ids=ids)
    except TurnConflictError:
        if m.Takeover.objects.filter(session=session, ended_at__isnull=True).exists():
            raise  # an attachment sent already (with another message)
        return None  # handed back meanwhile: a turn starts


def takeover_end(*, session: m.Session, user: Any, request: Any = None) -> m.Takeover:
    """Hand the session back to the agent (the operator holding it, or any user the agent lets
    take it over); the next message of its user starts a turn as usual."""
    row = open_takeover(session)
    if row is None:
        raise TurnConflictError("this session is not taken over")
    if row.operator_id != user.pk and not may_take_over(session=session, user=user):
        raise AccessDenied("only the operator who took this session over, or another operator, hands it back")
    with transaction.atomic():
        s = _locked(session.pk)
        if m.Turn.objects.filter(session=s, status=m.TurnStatus.RUNNING).exists():
            raise TurnConflictError("the reply you let finish is still running: hand back once it has ended")
        if not m.Takeover.objects.filter(pk=row.pk, ended_at__isnull=True).update(ended_at=timezone.now()):
            raise TurnConflictError("this session was handed back already")
        for message in _transcript_of(row, s):
            _append_txn(s, message)
        _publish(s, log_txn(s.pk, [ev.TakeoverEnded("", by=row.operator_name)], turn_id=None))
    audit.audit_record(
        action=m.AuditAction.HAND_BACK, user=user, request=request, session=session, detail={"messages": row.messages}
    )
    row.refresh_from_db()
    return row


def _transcript_of(row: m.Takeover, s: m.Session) -> list[Message]:
    """What the takeover adds to the transcript at its hand back: a note, the messages in the
    order they were written (from the event log), a note."""
    name = row.operator_name
    said = []
    events = m.Event.objects.filter(
        session_id=s.pk,
        generation=s.generation,
        type=ev.PersonMessage.type,
        created_at__gte=row.started_at,
    ).order_by("seq")
    for data in events.values_list("data", flat=True):
        if not isinstance(data, dict) or not (data.get("text") or data.get("attachments")):
            continue
        if data.get("role") == "person":
            said.append(Message(Role.ASSISTANT, text=str(data["text"]), by=PERSON_PREFIX + name))
        else:
            files = tuple(a for a in data.get("attachments") or () if isinstance(a, dict))
            said.append(Message(Role.USER, text=str(data.get("text") or ""), attachments=files))
    begin, end = m.BEGIN_NOTE.format(name=name), m.END_NOTE.format(name=name)
    return [Message(Role.TRIGGER, text=begin, by=NOTE_BY), *said, Message(Role.TRIGGER, text=end, by=NOTE_BY)]


# -- the transports' entry points, by (agent, key) ----------------------------------------------------


def _session_of(agent: str, key: str) -> m.Session | None:
    return m.Session.objects.filter(agent=agent, key=key).first()


def holds(*, agent: str, key: str, user: Any) -> bool:
    """``user`` is the operator holding the session's open takeover."""
    pk = getattr(user, "pk", None)
    return (
        pk is not None
        and m.Takeover.objects.filter(
            session__agent=agent, session__key=key, ended_at__isnull=True, operator_id=pk
        ).exists()
    )


def user_says_in(*, agent: str, key: str, user: Any, text: Any, attachments: Any = None) -> int | None:
    """The chat's message while its session is taken over (its owner only: AccessDenied
    otherwise); None when it is not (a turn starts as usual)."""
    session = services.session_for_user(agent=agent, key=key, user=user)
    if session is None or not m.Takeover.objects.filter(session=session, ended_at__isnull=True).exists():
        return None
    return user_says(session=session, user=user, text=text, attachments=attachments)


def person_says_in(*, agent: str, key: str, user: Any, text: Any) -> int:
    session = _session_of(agent, key)
    if session is None:
        raise AccessDenied("only the operator who took this session over writes in it")
    return person_says(session=session, user=user, text=text)
