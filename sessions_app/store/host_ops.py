"""Host operations on the Django database: create a turn, cancel, answer, reset — each one
transaction under the session's row lock, applying ``agents_app.runtime.rules`` inside it and
returning what it logged (an ``Outcome``)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, F, Q
from django.utils import timezone

from agents_app.runtime import events as ev
from agents_app.runtime import rules, subagents
from agents_app.runtime.messages import input_step_id
from agents_app.runtime.seams import (
    CancelReason,
    LoggedEvent,
    Outcome,
    SessionRef,
    SessionStatus,
    TurnInput,
    TurnStatus,
)
from sessions_app import models as m
from sessions_app.site_errors import NotSessionOwner
from sessions_app.store import checkpoint, checkpoint_plain, child_reports, opening, spawning
from sessions_app.store.rows import record_of, turn_row

dumps = checkpoint.dumps


def session_row(ref: SessionRef, *, owner: Any = None) -> m.Session:
    session, _ = m.Session.objects.get_or_create(agent=ref.agent, key=ref.key, defaults={"owner": owner})
    return session


def _locked_session_txn(pk: int) -> m.Session:
    return m.Session.objects.select_for_update().get(pk=pk)


def log_txn(
    session_id: int, events: list[ev.TurnEvent], *, turn_id: str | None, generation: int | None = None
) -> list[LoggedEvent]:
    return checkpoint_plain.log_events(session_id, events, turn_id=turn_id, generation=generation)


def session_status_txn(session_id: int) -> None:
    with connection.cursor() as cur:
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        cur.execute(checkpoint.session_status_sql(by_turn=False), checkpoint.session_status_params(session_id, now))


def start_facts_txn(s: m.Session, turn_id: str, *, parked: bool = True) -> dict[str, bool]:
    """``rules.check_start``'s facts in one statement (``parked=False``: a fork, which a park
    does not stop)."""
    facts = {
        "turn_exists": Exists(m.Turn.objects.filter(pk=turn_id)),
        "taken_over": Exists(m.Takeover.objects.filter(session_id=s.pk, ended_at__isnull=True)),
    }
    if parked:
        facts["parked"] = Exists(
            m.Turn.objects.filter(session_id=s.pk, status=TurnStatus.SUSPENDED, generation=s.generation, waiting=0)
        )
    row = m.Session.objects.filter(pk=s.pk).values(**facts).first() or {}
    return {"parked": False, **{k: bool(v) for k, v in row.items()}}


def create_turn(
    session: SessionRef,
    input: TurnInput,
    *,
    turn_id: str,
    replace: bool = False,
    policy: dict[str, Any] | None = None,
    created_by: Any = None,
) -> Outcome:
    """Create the queued turn (a new session is owned by ``created_by``; a user creates turns in
    their own sessions only: ``NotSessionOwner`` otherwise, nothing written). On PostgreSQL a plain
    creation is one round trip on Django's connection (``opening.create``), in the caller's
    transaction if one is open, where a refusal rolls back to this block's savepoint; with none
    open, the round trip is a transaction of its own (PostgreSQL commits its statements at their
    Sync, or none of them), and Django's atomic block would add only its bookkeeping. A broken
    connection raises Django's ``OperationalError`` (and Django drops the connection), as
    the ORM's statements would: the round trip goes on psycopg's connection under Django's."""
    if not replace and connection.vendor == "postgresql":
        connection.ensure_connection()
        inside = connection.in_atomic_block
        with transaction.atomic() if inside else nullcontext(), connection.wrap_database_errors:
            return opening.create(
                connection.connection,
                session,
                input,
                turn_id=turn_id,
                policy=policy,
                created_by=created_by,
                ends_transaction=not inside,
            )
    with transaction.atomic():
        s = session_row(session, owner=created_by)
        s = _locked_session_txn(s.pk)  # concurrent starts and replaces of a session serialize
        if getattr(created_by, "pk", None) is not None and s.owner_id != created_by.pk:
            raise NotSessionOwner(f"session {session} is not the creator's")
        rules.check_start(**start_facts_txn(s, turn_id))
        events: list[ev.TurnEvent] = []
        running: list[str] = []
        cascaded: list[str] = []
        if replace:
            cascaded = spawning.cascade_txn(spawning.candidates_txn(s.pk, CancelReason.REPLACED))
            events, running = cancel_unfinished_txn(s, CancelReason.REPLACED)
        m.Session.objects.filter(pk=s.pk).update(turn_seq=F("turn_seq") + 1)
        turn = m.Turn.objects.create(
            id=turn_id,
            session=s,
            order=s.turn_seq + 1,
            generation=s.generation,
            status=TurnStatus.QUEUED,
            kind=input.kind,
            source=input.source or "",
            input=input.to_json(),
            policy=policy,
            created_by=created_by,
        )
        logged = log_txn(s.pk, events, turn_id=None)
        session_status_txn(s.pk)
        return Outcome(
            events=logged,
            running=running,
            turn=record_of(turn, s),
            cascaded=cascaded,
            runnable=_report_cancelled(events, CancelReason.REPLACED),
        )


def cancel_unfinished_txn(s: m.Session, reason: str) -> tuple[list[ev.TurnEvent], list[str]]:
    """``rules.cancel_now`` turns are cancelled now; running ones get the request.

    One conditional UPDATE each (no read-then-write): a turn a worker claims meanwhile (claims
    do not take the session lock) is left running and gets the request, instead of being
    flipped to cancelled under the worker's feet and then cancelled a second time."""
    now_cancel = sorted(str(st) for st in TurnStatus if rules.cancel_now(st, reason=reason))
    waiting = sorted(str(st) for st in rules.CANCEL_AT_ONCE_WAITING)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE sessions_app_turn SET status = %s, cancel_reason = %s, error = %s, pending = NULL, waiting = 0, "
            "ended_at = %s "
            f"WHERE session_id = %s AND (status IN ({', '.join(['%s'] * len(now_cancel))}) "
            f"OR (waiting > 0 AND status IN ({', '.join(['%s'] * len(waiting))}))) "
            'RETURNING id, "order"',
            [
                str(TurnStatus.CANCELLED),
                reason,
                dumps({"reason": reason}),
                checkpoint.plain_now(),
                s.pk,
                *now_cancel,
                *waiting,
            ],
        )
        cancelled = sorted(cur.fetchall(), key=lambda row: row[1])
        requested = sorted(str(st) for st in rules.CANCEL_REQUESTED)
        cur.execute(
            "UPDATE sessions_app_turn SET cancel_reason = %s "
            f"WHERE session_id = %s AND status IN ({', '.join(['%s'] * len(requested))}) "
            "AND cancel_reason IS NULL RETURNING id",
            [reason, s.pk, *requested],
        )
        running = [row[0] for row in cur.fetchall()]
    return [ev.TurnCancelled(turn_id, reason=reason) for turn_id, _ in cancelled], running


def request_cancel(turn_id: str, reason: str) -> Outcome:
    with transaction.atomic():
        turn = turn_row(turn_id)
        _locked_session_txn(turn.session_id)  # the lock order: the session row, then the turn's
        logged: list[LoggedEvent] = []
        running: list[str] = []
        runnable: list[tuple[str, SessionRef]] = []
        now_cancel = [st for st in TurnStatus if rules.cancel_now(st, reason=reason)]
        at_once = Q(status__in=now_cancel) | Q(waiting__gt=0, status__in=rules.CANCEL_AT_ONCE_WAITING)
        cascaded = (
            spawning.cascade_txn([turn_id])
            if (
                rules.cancel_now(TurnStatus(turn.status), reason=reason, waiting=turn.waiting)
                or rules.gets_request(record_of(turn))
            )
            else []
        )
        if m.Turn.objects.filter(at_once, pk=turn_id).update(
            status=TurnStatus.CANCELLED,
            cancel_reason=reason,
            error={"reason": reason},
            pending=None,
            waiting=0,
            ended_at=timezone.now(),
        ):
            logged = log_txn(turn.session_id, [ev.TurnCancelled(turn_id, reason=reason)], turn_id=turn_id)
            session_status_txn(turn.session_id)
            runnable = _report_cancelled([ev.TurnCancelled(turn_id, reason=reason)], reason)
        elif m.Turn.objects.filter(pk=turn_id, status__in=rules.CANCEL_REQUESTED, cancel_reason__isnull=True).update(
            cancel_reason=reason
        ):
            running = [turn_id]
        return Outcome(
            events=logged, running=running, turn=record_of(turn_row(turn_id)), cascaded=cascaded, runnable=runnable
        )


def answer(turn_id: str, input_id: str, answer: Any, record: dict[str, Any]) -> Outcome:
    """``record``: ``by``, ``via``, ``name``; ``user_id`` and ``remote_addr`` for the Answer row."""
    with transaction.atomic():
        turn = turn_row(turn_id)
        s = _locked_session_txn(turn.session_id)
        turn.refresh_from_db()
        rules.check_resumable(record_of(turn, s), input_id=input_id, generation=s.generation)
        m.Step.objects.create(turn=turn, key=input_step_id(turn_id, input_id), data=answer)
        m.Answer.objects.create(
            turn=turn,
            input_id=input_id,
            answer=answer,
            by=record.get("by"),
            user_id=record.get("user_id"),
            via=record.get("via", "api"),
            remote_addr=record.get("remote_addr") or "",
        )
        m.AuditEvent.objects.create(
            action=m.AuditAction.ANSWER,
            actor_id=str(record.get("user_id") or ""),
            actor=str(record.get("name") or record.get("by") or "")[:150],
            subject=m.subject_of(s.owner_id),
            session_id=s.pk,
            generation=turn.generation,
            turn_id=turn_id,
            remote_addr=record.get("remote_addr") or "",
            detail={"input_id": input_id, "via": record.get("via") or ""},
        )
        answered = ev.InputAnswered(
            turn_id,
            input_id=input_id,
            by=record.get("by"),
            name=record.get("name"),
            answer=answer,
            via=record.get("via"),
        )
        rest = rules.after_answer(turn.pending or {}, input_id)
        if rest is not None:  # a sibling call's approval is still owed: the turn stays parked
            m.Turn.objects.filter(pk=turn_id, status=TurnStatus.SUSPENDED).update(pending=rest)
            return Outcome(events=log_txn(s.pk, [answered], turn_id=turn_id), turn=record_of(turn_row(turn_id)))
        journal = {
            **(turn.journal or {}),
            "answered": {"input_id": input_id, "by": record.get("by"), "via": record.get("via")},
        }
        updated = m.Turn.objects.filter(pk=turn_id, status=TurnStatus.SUSPENDED).update(
            status=TurnStatus.QUEUED, pending=None, journal=journal, lease_owner=None, lease_expires_at=None
        )
        if not updated:  # cannot happen under the session lock; kept as the conditional write
            rules.check_resumable(record_of(turn_row(turn_id), s), input_id=input_id, generation=s.generation)
        logged = log_txn(
            s.pk,
            [answered, ev.TurnStarted(turn_id, trigger="resume", text=turn.input.get("text", ""))],
            turn_id=turn_id,
        )
        session_status_txn(s.pk)
        return Outcome(events=logged, turn=record_of(turn_row(turn_id)))


def resume_parked(turn_id: str, reason: str, key: str) -> Outcome | None:
    """Queue again a turn parked on its model's answer ``key`` (a batch's request,
    ``rules.parked_on``), under its session's lock; None, nothing written, when it is not."""
    with transaction.atomic():
        turn = turn_row(turn_id)
        s = _locked_session_txn(turn.session_id)
        turn.refresh_from_db()
        if not rules.parked_on(record_of(turn, s), reason, key):
            return None
        journal = {**(turn.journal or {}), "resumed": {reason: key}}
        m.Turn.objects.filter(pk=turn_id, status=TurnStatus.SUSPENDED).update(
            status=TurnStatus.QUEUED, pending=None, waiting=0, journal=journal, lease_owner=None, lease_expires_at=None
        )
        logged = log_txn(
            s.pk, [ev.TurnStarted(turn_id, trigger="resume", text=turn.input.get("text", ""))], turn_id=turn_id
        )
        session_status_txn(s.pk)
        return Outcome(events=logged, turn=record_of(turn_row(turn_id)))


def reset(session: SessionRef, *, by: Any = None) -> Outcome:
    """O(1) in the archive: the live generation is archived by moving to the next generation
    number handed out. ``by`` is the user who reset (a ``User`` or None)."""
    with transaction.atomic():
        s = _locked_session_txn(session_row(session).pk)
        cascaded = spawning.cascade_txn(spawning.candidates_txn(s.pk, CancelReason.RESET))
        cancelled, running = cancel_unfinished_txn(s, CancelReason.RESET)
        runnable = _report_cancelled(cancelled, CancelReason.RESET)
        logged = log_txn(s.pk, cancelled, turn_id=None)
        previous = f"{s.key}#g{s.generation}"
        m.SessionReset.objects.create(session=s, generation=s.generation, by=by if getattr(by, "pk", None) else None)
        generation = s.generation_seq + 1  # a number no branch nor earlier reset has had
        m.Session.objects.filter(pk=s.pk).update(
            generation=generation,
            generation_seq=generation,
            status=SessionStatus.NEW,
            updated_at=timezone.now(),
            boundary=0,
            summary_index=None,
        )
        logged += log_txn(s.pk, [ev.SessionReset("", previous_session=previous, generation=generation)], turn_id=None)
        return Outcome(
            events=logged,
            running=running,
            previous_session=previous,
            generation=generation,
            cascaded=cascaded,
            runnable=runnable,
        )


def _report_cancelled(cancelled: list[ev.TurnEvent], reason: str) -> list[tuple[str, SessionRef]]:
    """Children among the turns a cancel settled at once report to their parents (the parent
    may now be runnable); ``rules.CASCADE`` never gets here: its parents are cancelled too."""
    woken: list[tuple[str, SessionRef]] = []
    for event in cancelled:
        woken += child_reports.report_txn(
            event.turn_id, subagents.result_of(event.turn_id, TurnStatus.CANCELLED, "", {"reason": reason}, None)
        )
    return woken
