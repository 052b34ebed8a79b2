"""DjangoSessionStore: the SessionStore on the Django database (SQLite or PostgreSQL).

The one module that opens transactions for the engine. A unit of work that runs a sync tool
runs in one synchronous function on the thread that owns Django's connection
(``sync_to_async``), so the tool's ORM writes and the checkpoint share one
``transaction.atomic()``. A unit that runs no tool code (``inline=True``) runs, on PostgreSQL,
on the caller's thread and the store's own connection (``sessions_app.store.direct``): no thread hop.
Every checkpoint is fenced: it commits only if the attempt still owns the turn, else
everything — tool writes included — rolls back.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.db.models import F

from agents_app.runtime import events as ev
from agents_app.runtime.errors import (
    NotFound,
    SessionSuspendedError,
    StaleAttemptError,
    TurnConflictError,
    TurnNotResumable,
)
from agents_app.runtime.messages import Message as RtMessage
from agents_app.runtime.messages import input_step_id
from agents_app.runtime.seams import (
    CancelReason,
    Commit,
    LoggedEvent,
    Phase,
    SessionRef,
    SessionStatus,
    TurnInput,
    TurnRecord,
    TurnState,
    TurnStatus,
)

from sessions_app.store import checkpoint, direct, eventlog
from sessions_app import models as m

CHAIN_BLOCKING = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.SUSPENDED)


_dumps = checkpoint.dumps


def record_of(turn: m.Turn, session: m.Session | None = None) -> TurnRecord:
    s = session or turn.session
    return TurnRecord(
        turn_id=turn.id,
        session=SessionRef(s.agent, s.key),
        status=TurnStatus(turn.status),
        input=TurnInput.from_json(turn.input or {}),
        generation=turn.generation,
        cancel_reason=turn.cancel_reason,
        attempt_id=turn.attempt_id,
        attempts=turn.attempts,
        lease_owner=turn.lease_owner,
        lease_expires=turn.lease_expires_at,
        phase=turn.phase,
        journal=turn.journal or {},
        pending=turn.pending,
        policy=turn.policy,
        text=turn.text or "",
        error=turn.error,
        usage=turn.usage or {},
    )


class _DjangoTx:
    """Collects a unit's writes; ``flush`` writes them in a handful of statements."""

    def __init__(self, turn_id: str, attempt_id: str | None) -> None:
        self.turn_id = turn_id
        self.attempt_id = attempt_id
        self.messages: list[tuple[int, RtMessage]] = []
        self.steps: list[tuple[str, int | None, Any]] = []
        self.events: list[ev.TurnEvent] = []
        self.turn_changes: dict[str, Any] = {}

    def append(self, message: RtMessage, index: int) -> None:
        self.messages.append((index, message))

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        self.steps.append((step_id, index, data))

    def emit(self, event: ev.TurnEvent) -> None:
        self.events.append(event)

    def journal(self, phase: Phase, **data: Any) -> None:
        self.turn_changes.update(_journal_changes(self.attempt_id, phase, data))

    def settle(self, status: TurnStatus, *, text: str = "", error: dict[str, Any] | None = None,
               pending: dict[str, Any] | None = None, usage: dict[str, int] | None = None) -> None:
        self.turn_changes["status"] = str(status)
        self.turn_changes["text"] = text
        self.turn_changes["error"] = _dumps(error) if error is not None else None
        self.turn_changes["pending"] = _dumps(pending) if pending is not None else None
        if usage is not None:
            self.turn_changes["usage"] = _dumps(usage)

    def savepoint(self, fn: Callable[[], Any]) -> Any:
        with transaction.atomic():
            return fn()


class DjangoSessionStore:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock

    def unwrap(self) -> Any:
        return connection

    # -- connections (a worker keeps them across tasks) ----------------------------------------------

    async def drop_broken_connections(self) -> None:
        """Close the connections the server dropped, keep the rest (a connect costs more than a
        short turn's first step)."""
        await sync_to_async(_drop_unusable_connections)()
        direct.drop_unusable()

    async def close_connections(self) -> None:
        await sync_to_async(connections.close_all)()
        direct.close_all()

    # -- the checkpoint ---------------------------------------------------------------------------

    def atomic_sync(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], Any]) -> Commit:
        tx = _DjangoTx(turn_id, attempt_id)
        with transaction.atomic():
            value = work(tx)
            # the checkpoint also recomputes the session's status when the turn's status changes
            written = checkpoint.write(turn_id, attempt_id, tx.turn_changes, tx.messages, tx.steps, tx.events)
        return Commit(events=written.events, cancel_reason=written.cancel_reason, value=value)

    def _log_txn(self, session_id: int, events: list[ev.TurnEvent], *, turn_id: str | None,
                 generation: int | None = None) -> list[LoggedEvent]:
        return checkpoint.log_events(session_id, events, turn_id=turn_id, generation=generation)

    def _session_status_txn(self, session_id: int) -> None:
        with connection.cursor() as cur:
            cur.execute(checkpoint.session_status_sql(by_turn=False), checkpoint.session_status_params(session_id))

    def atomic_inline(self, raw: Any, turn_id: str, attempt_id: str | None, work: Callable[[Any], Any]) -> Commit:
        """A unit that runs no tool code, on the caller's thread and the store's own PostgreSQL
        connection (``sessions_app.store.direct``): one round trip, COMMIT included."""
        tx = _DjangoTx(turn_id, attempt_id)
        value = work(tx)
        written = checkpoint.write_postgresql(raw, turn_id, attempt_id, tx.turn_changes, tx.messages, tx.steps,
                                              tx.events)
        return Commit(events=written.events, cancel_reason=written.cancel_reason, value=value)

    def journal_sync(self, turn_id: str, attempt_id: str | None, phase: Phase, **data: Any) -> None:
        # raises StaleAttemptError
        checkpoint.write_journal(turn_id, attempt_id, _journal_changes(attempt_id, phase, data))

    # -- loading ----------------------------------------------------------------------------------

    def load_sync(self, turn_id: str) -> TurnState:
        turn = self._turn(turn_id)
        with connection.cursor() as cur:
            if connection.vendor == "postgresql":  # one JSON array: one decode, not one per row
                cur.execute(
                    "SELECT coalesce(json_agg(data ORDER BY \"index\")::text, '[]') FROM sessions_app_message "
                    "WHERE session_id = %s AND generation = %s",
                    [turn.session_id, turn.generation],
                )
                transcript = [RtMessage.from_json(d) for d in json.loads(cur.fetchone()[0])]
            else:
                cur.execute(
                    "SELECT data FROM sessions_app_message WHERE session_id = %s AND generation = %s "
                    "ORDER BY \"index\"",
                    [turn.session_id, turn.generation],
                )
                transcript = [RtMessage.from_json(_loads(row[0])) for row in cur.fetchall()]
            cur.execute("SELECT key, data FROM sessions_app_step WHERE turn_id = %s", [turn_id])
            rows = cur.fetchall()
        prefix = f"input:{turn_id}:"
        answers = {k[len(prefix):]: _loads(d) for k, d in rows if k.startswith(prefix)}
        steps = {k for k, _ in rows if not k.startswith("input:")}
        return TurnState(turn=record_of(turn), transcript=transcript, steps=steps, answers=answers)

    def _turn(self, turn_id: str) -> m.Turn:
        try:
            return m.Turn.objects.select_related("session").get(pk=turn_id)
        except m.Turn.DoesNotExist:
            raise NotFound(f"no turn {turn_id}") from None

    def get_turn_sync(self, turn_id: str) -> TurnRecord:
        return record_of(self._turn(turn_id))

    # -- submissions and the lease ------------------------------------------------------------------

    def session_row(self, ref: SessionRef, *, owner: Any = None) -> m.Session:
        session, _ = m.Session.objects.get_or_create(agent=ref.agent, key=ref.key, defaults={"owner": owner})
        return session

    def create_turn_sync(self, session: SessionRef, input: TurnInput, *, turn_id: str, replace: bool = False,
                         policy: dict[str, Any] | None = None, created_by: Any = None) -> TurnRecord:
        return self.create_turn_logged(session, input, turn_id=turn_id, replace=replace, policy=policy,
                                       created_by=created_by)[0]

    def create_turn_logged(self, session: SessionRef, input: TurnInput, *, turn_id: str, replace: bool = False,
                           policy: dict[str, Any] | None = None,
                           created_by: Any = None) -> tuple[TurnRecord, list[LoggedEvent]]:
        """Create the queued turn; also returns the events it logged (turns it replaced)."""
        with transaction.atomic():
            s = self.session_row(session, owner=created_by)
            # lock the session row so concurrent starts and replaces serialize
            s = m.Session.objects.select_for_update().get(pk=s.pk)
            if m.Turn.objects.filter(session=s, status=TurnStatus.SUSPENDED, generation=s.generation).exists():
                raise SessionSuspendedError("the session is waiting for an answer; answer it or reset the session")
            if m.Turn.objects.filter(pk=turn_id).exists():
                raise TurnConflictError(f"turn {turn_id} exists")
            events: list[ev.TurnEvent] = []
            if replace:
                events += self._cancel_unfinished_txn(s, CancelReason.REPLACED)
            m.Session.objects.filter(pk=s.pk).update(turn_seq=F("turn_seq") + 1)
            turn = m.Turn.objects.create(
                id=turn_id, session=s, order=s.turn_seq + 1, generation=s.generation, status=TurnStatus.QUEUED, kind=input.kind,
                source=input.source or "", input=input.to_json(), policy=policy, created_by=created_by,
                retry_budget=0,
            )
            logged = self._log_txn(s.pk, events, turn_id=None)
            self._session_status_txn(s.pk)
            return record_of(turn, s), logged

    def _cancel_unfinished_txn(self, s: m.Session, reason: str, *, parked_too: bool = False) -> list[ev.TurnEvent]:
        """Queued (and, for reset, parked) turns are cancelled now; running ones get the request.

        One conditional UPDATE (no read-then-write): a turn a worker claims meanwhile (claims do
        not take the session lock) is left running and gets the request below, instead of being
        flipped to cancelled under the worker's feet and then cancelled a second time."""
        now_cancel = [str(TurnStatus.QUEUED)] + ([str(TurnStatus.SUSPENDED)] if parked_too else [])
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE sessions_app_turn SET status = %s, cancel_reason = %s, error = %s, pending = NULL "
                f"WHERE session_id = %s AND status IN ({', '.join(['%s'] * len(now_cancel))}) "
                'RETURNING id, "order"',
                [str(TurnStatus.CANCELLED), reason, _dumps({"reason": reason}), s.pk, *now_cancel],
            )
            cancelled = sorted(cur.fetchall(), key=lambda row: row[1])
        m.Turn.objects.filter(session=s, status=TurnStatus.RUNNING, cancel_reason__isnull=True).update(cancel_reason=reason)
        return [ev.TurnCancelled(turn_id, reason=reason) for turn_id, _ in cancelled]

    def claim_sync(self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float) -> TurnRecord | None:
        """One conditional UPDATE: runnable, lease free or expired, first of its chain."""
        with connection.cursor() as cur:
            cur.execute(
                """
                UPDATE sessions_app_turn SET status = %s, lease_owner = %s, lease_expires_at = %s,
                       attempt_id = %s, attempts = attempts + 1, revision = revision + 1
                WHERE id = %s
                  AND (status = %s OR (status = %s AND (lease_expires_at IS NULL OR lease_expires_at < %s)))
                  AND NOT EXISTS (
                    SELECT 1 FROM sessions_app_turn AS t2
                    WHERE t2.session_id = sessions_app_turn.session_id
                      AND t2.status IN (%s, %s, %s)
                      AND t2."order" < sessions_app_turn."order"
                  )
                """,
                [TurnStatus.RUNNING, owner, now + lease_seconds, attempt_id, turn_id,
                 TurnStatus.QUEUED, TurnStatus.RUNNING, now, *CHAIN_BLOCKING],
            )
            claimed = cur.rowcount == 1
        if not claimed:
            return None
        turn = self._turn(turn_id)
        if turn.session.status != SessionStatus.RUNNING:
            m.Session.objects.filter(pk=turn.session_id).update(status=SessionStatus.RUNNING)
        return record_of(turn)

    def heartbeat_sync(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE sessions_app_turn SET lease_expires_at = %s WHERE id = %s AND attempt_id = %s "
                "AND status = %s RETURNING cancel_reason",
                [now + lease_seconds, turn_id, attempt_id, TurnStatus.RUNNING],
            )
            row = cur.fetchone()
        if row is None:
            raise StaleAttemptError(f"turn {turn_id}: attempt {attempt_id} lost the lease")
        return row[0]

    def release_sync(self, turn_id: str, *, attempt_id: str) -> None:
        m.Turn.objects.filter(pk=turn_id, attempt_id=attempt_id, status=TurnStatus.RUNNING).update(
            status=TurnStatus.QUEUED, lease_owner=None, lease_expires_at=None
        )

    # -- cancel, answer, reset ------------------------------------------------------------------------

    def request_cancel_sync(self, turn_id: str, reason: str) -> tuple[TurnRecord, list[LoggedEvent]]:
        with transaction.atomic():
            turn = self._turn(turn_id)
            logged: list[LoggedEvent] = []
            if m.Turn.objects.filter(pk=turn_id, status=TurnStatus.QUEUED).update(
                status=TurnStatus.CANCELLED, cancel_reason=reason, error={"reason": reason}
            ):
                logged = self._log_txn(turn.session_id, [ev.TurnCancelled(turn_id, reason=reason)], turn_id=turn_id)
                self._session_status_txn(turn.session_id)
            else:
                m.Turn.objects.filter(pk=turn_id, status=TurnStatus.RUNNING, cancel_reason__isnull=True).update(
                    cancel_reason=reason
                )
            return record_of(self._turn(turn_id)), logged

    def answer_sync(self, turn_id: str, input_id: str, answer: Any, record: dict[str, Any],
                    *, user: Any = None, remote_addr: str = "") -> tuple[TurnRecord, list[LoggedEvent]]:
        with transaction.atomic():
            turn = self._turn(turn_id)
            s = m.Session.objects.select_for_update().get(pk=turn.session_id)
            turn.refresh_from_db()
            pending = turn.pending or {}
            if turn.status != TurnStatus.SUSPENDED or turn.generation != s.generation:
                raise TurnNotResumable(f"turn {turn_id} is not waiting for an answer")
            if (pending.get("request") or {}).get("id") != input_id:
                raise TurnConflictError(f"turn {turn_id} is not waiting for input {input_id!r}")
            m.Step.objects.create(turn=turn, key=input_step_id(turn_id, input_id), data=answer)
            m.Answer.objects.create(turn=turn, input_id=input_id, answer=answer, by=record.get("by"),
                                    user=user, via=record.get("via", "api"), remote_addr=remote_addr)
            journal = {**(turn.journal or {}), "answered": {"input_id": input_id, "by": record.get("by"),
                                                             "via": record.get("via")}}
            updated = m.Turn.objects.filter(pk=turn_id, status=TurnStatus.SUSPENDED).update(
                status=TurnStatus.QUEUED, pending=None, journal=journal, lease_owner=None, lease_expires_at=None
            )
            if not updated:
                raise TurnNotResumable(f"turn {turn_id} is not waiting for an answer")
            logged = self._log_txn(s.pk, [ev.InputAnswered(turn_id, input_id=input_id, by=record.get("by"),
                                                           name=record.get("name"), answer=answer,
                                                           via=record.get("via")),
                                          ev.TurnStarted(turn_id, trigger="resume", text=turn.input.get("text", ""))],
                                   turn_id=turn_id)
            self._session_status_txn(s.pk)
            return record_of(self._turn(turn_id)), logged

    def reset_sync(self, session: SessionRef, *, by: Any = None) -> tuple[str, int, list[LoggedEvent]]:
        """O(1) in the archive: the live generation is archived by bumping the number."""
        with transaction.atomic():
            s = self.session_row(session)
            s = m.Session.objects.select_for_update().get(pk=s.pk)
            cancelled = self._cancel_unfinished_txn(s, CancelReason.RESET, parked_too=True)
            logged = self._log_txn(s.pk, cancelled, turn_id=None)
            previous = f"{s.key}#g{s.generation}"
            m.SessionReset.objects.create(session=s, generation=s.generation, by=by)
            m.Session.objects.filter(pk=s.pk).update(generation=F("generation") + 1, status=SessionStatus.NEW)
            generation = s.generation + 1
            logged += self._log_txn(s.pk, [ev.SessionReset("", previous_session=previous, generation=generation)],
                                    turn_id=None)
            return previous, generation, logged

    # -- reads --------------------------------------------------------------------------------------

    def pending_sync(self, session: SessionRef) -> list[dict[str, Any]]:
        s = m.Session.objects.filter(agent=session.agent, key=session.key).first()
        if s is None:
            return []
        return [
            {"turn_id": t.id, **(t.pending or {})}
            for t in m.Turn.objects.filter(session=s, status=TurnStatus.SUSPENDED, generation=s.generation)
        ]

    def events_sync(self, session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
        s = m.Session.objects.filter(agent=session.agent, key=session.key).first()
        if s is None:
            return []
        rows = list(m.Event.objects.filter(session=s, generation=s.generation, seq__gt=after).order_by("seq")
                    .values_list("seq", "data")[:limit])
        whole = eventlog.restore((s.pk, s.generation, data) for _, data in rows)
        return [LoggedEvent(seq, ev.event_from_json(data)) for (seq, _), data in zip(rows, whole)]

    def next_queued_sync(self, session: SessionRef) -> str | None:
        first = (
            m.Turn.objects.filter(session__agent=session.agent, session__key=session.key, status__in=CHAIN_BLOCKING)
            .order_by("order")
            .values_list("id", "status")
            .first()
        )
        return first[0] if first and first[1] == TurnStatus.QUEUED else None

    # -- the async SessionStore face ------------------------------------------------------------------

    async def atomic(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], Any], *,
                     inline: bool = False) -> Commit:
        if inline and (raw := direct.connection()) is not None:
            return self.atomic_inline(raw, turn_id, attempt_id, work)
        return await sync_to_async(self.atomic_sync)(turn_id, attempt_id, work)

    async def journal(self, turn_id: str, attempt_id: str | None, phase: Phase, **data: Any) -> None:
        if (raw := direct.connection()) is not None:  # lands before the next checkpoint on raw
            checkpoint.send_journal(raw, turn_id, attempt_id, _journal_changes(attempt_id, phase, data))
        else:
            await sync_to_async(self.journal_sync)(turn_id, attempt_id, phase, **data)

    async def load(self, turn_id: str) -> TurnState:
        return await sync_to_async(self.load_sync)(turn_id)

    async def get_turn(self, turn_id: str) -> TurnRecord:
        return await sync_to_async(self.get_turn_sync)(turn_id)

    async def create_turn(self, session: SessionRef, input: TurnInput, *, turn_id: str, replace: bool = False,
                          policy: dict[str, Any] | None = None) -> TurnRecord:
        return await sync_to_async(self.create_turn_sync)(session, input, turn_id=turn_id, replace=replace, policy=policy)

    async def claim(self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float) -> TurnRecord | None:
        return await sync_to_async(self.claim_sync)(turn_id, owner=owner, attempt_id=attempt_id, now=now,
                                                     lease_seconds=lease_seconds)

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        return await sync_to_async(self.heartbeat_sync)(turn_id, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        await sync_to_async(self.release_sync)(turn_id, attempt_id=attempt_id)

    async def request_cancel(self, turn_id: str, reason: str) -> TurnRecord:
        rec, _ = await sync_to_async(self.request_cancel_sync)(turn_id, reason)
        return rec

    async def answer(self, turn_id: str, input_id: str, answer: Any, record: dict[str, Any]) -> TurnRecord:
        rec, _ = await sync_to_async(self.answer_sync)(turn_id, input_id, answer, record)
        return rec

    async def reset(self, session: SessionRef, *, by: Any = None) -> tuple[str, int]:
        previous, generation, _ = await sync_to_async(self.reset_sync)(session, by=None)
        return previous, generation

    async def pending(self, session: SessionRef) -> list[dict[str, Any]]:
        return await sync_to_async(self.pending_sync)(session)

    async def events(self, session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
        return await sync_to_async(self.events_sync)(session, after, limit)

    async def next_queued(self, session: SessionRef) -> str | None:
        return await sync_to_async(self.next_queued_sync)(session)


def _journal_changes(attempt_id: str | None, phase: Phase, data: dict[str, Any]) -> dict[str, Any]:
    return {"phase": str(phase), "journal": _dumps({**data, "attempt_id": attempt_id})}


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _drop_unusable_connections() -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and (conn.errors_occurred or not conn.is_usable()):
            conn.close()
