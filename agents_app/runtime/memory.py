"""InMemorySessionStore: the SessionStore for unit tests and the contract suite's baseline.

It has no rollback for tools' own effects (``unwrap()`` is None, so a tool that needs the
store's transaction fails the turn), but its checkpoint units are all-or-nothing: a unit's
writes are staged and applied only when the unit returns.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from . import branches, memory_branches, rules
from . import events as ev
from .compaction import transcript_start
from .errors import StaleAttemptError
from .memory_rows import MemoryTx, TurnRow
from .memory_tables import UNFINISHED, MemoryTables, is_parked
from .messages import Message, input_step_id
from .seams import (
    FINAL_STATUSES,
    CancelReason,
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


class InMemorySessionStore(MemoryTables):
    def unwrap(self) -> Any:
        return None

    # -- SessionStore -------------------------------------------------------------------------

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
        s = self._session(session)
        parked = any(is_parked(t.record) and t.record.generation == s.generation for t in self._session_turns(session))
        rules.check_start(turn_exists=turn_id in self._turns, parked=parked)
        events: list[ev.TurnEvent] = []
        running: list[str] = []
        if replace:
            events, running = self._cancel(self._session_turns(session), CancelReason.REPLACED)
        self._order += 1
        record = TurnRecord(
            turn_id=turn_id,
            session=session,
            status=TurnStatus.QUEUED,
            input=input,
            generation=s.generation,
            policy=policy,
        )
        self._add(TurnRow(record, self._order))
        logged = self._log(s, events)
        self._refresh_session_status(s)
        return Outcome(events=logged, running=running, turn=record, runnable=self._woken(), cascaded=self._rung())

    async def get_turn(self, turn_id: str) -> TurnRecord:
        return self._turn(turn_id).record

    async def claim(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float
    ) -> TurnRecord | None:
        turn = self._turn(turn_id)
        rec = turn.record
        if rec.status not in UNFINISHED:
            return None
        if rec.status == TurnStatus.RUNNING and rec.lease_expires is not None and rec.lease_expires > now:
            return None
        for other in self._session_turns(rec.session):
            if other.order < turn.order and other.record.status in rules.CHAIN_BLOCKING:
                return None
        self._set(
            turn,
            status=TurnStatus.RUNNING,
            attempt_id=attempt_id,
            attempts=rec.attempts + 1,
            lease_owner=owner,
            lease_expires=now + lease_seconds,
        )
        return turn.record

    async def claim_and_load(
        self, turn_id: str, *, owner: str, attempt_id: str, now: float, lease_seconds: float, opening: Any = None
    ) -> TurnState | None:
        # ``opening`` is not taken up: the loop opens the turn in a unit of its own (``atomic``)
        claimed = await self.claim(turn_id, owner=owner, attempt_id=attempt_id, now=now, lease_seconds=lease_seconds)
        return None if claimed is None else await self.load(turn_id)

    async def heartbeat(self, turn_id: str, *, attempt_id: str, now: float, lease_seconds: float) -> str | None:
        turn = self._turn(turn_id)
        if turn.record.attempt_id != attempt_id or turn.record.status != TurnStatus.RUNNING:
            raise StaleAttemptError(turn_id)
        self._set(turn, lease_expires=now + lease_seconds)
        return turn.record.cancel_reason

    async def release(self, turn_id: str, *, attempt_id: str) -> None:
        turn = self._turn(turn_id)
        if turn.record.attempt_id == attempt_id and turn.record.status == TurnStatus.RUNNING:
            self._set(turn, status=TurnStatus.QUEUED, lease_owner=None, lease_expires=None)

    async def load(self, turn_id: str) -> TurnState:
        turn = self._turn(turn_id)
        s = self._session(turn.record.session)
        prefix = f"input:{turn_id}:"
        answers = {k[len(prefix) :]: v["data"] for k, v in turn.steps.items() if k.startswith(prefix)}
        spawn_prefix = f"spawn:{turn_id}:"
        spawned = {
            k[len(spawn_prefix) :]: copy.deepcopy(v["data"])
            for k, v in turn.steps.items()
            if k.startswith(spawn_prefix)
        }
        steps = {k for k in turn.steps if not k.startswith("input:")}
        live = turn.record.generation == s.generation
        boundary, summary = (s.boundary, s.summary) if live else (0, None)
        base = transcript_start(boundary, ((k, v["data"]) for k, v in turn.steps.items()))
        messages = s.messages if live else s.archive.get(turn.record.generation, [])
        return TurnState(
            turn=turn.record,
            transcript=list(messages[base:]),
            steps=steps,
            answers=answers,
            base=base,
            boundary=boundary,
            summary=summary,
            spawned=spawned,
        )

    async def commit(self, turn_id: str, attempt_id: str | None, record: Callable[[Any], None]) -> Commit:
        return await self.atomic(turn_id, attempt_id, record)

    async def atomic(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], None]) -> Commit:
        turn = self._turn(turn_id)
        if attempt_id is not None and turn.record.attempt_id != attempt_id:
            raise StaleAttemptError(turn_id)
        tx = MemoryTx(self._sessions[turn.record.session], turn)
        work(tx)
        s = tx.session
        if turn.record.generation == s.generation:
            s.messages.extend(tx.messages)
            if tx.moved is not None:
                s.boundary, s.summary = tx.moved
        else:  # a turn of an archived generation keeps writing into its archive
            s.archive.setdefault(turn.record.generation, []).extend(tx.messages)
        turn.steps.update(tx.steps)
        made = [self._create_child(turn, child) for child in tx.children]
        runnable = [r for r in made if r is not None]
        if tx.changes:
            attempts = rules.attempts_after(turn.record.attempts, tx.changes.get("status"))
            self._set(turn, **tx.changes, attempts=attempts)
        logged = self._log(s, tx.events) if turn.record.generation == s.generation else []
        self._refresh_session_status(s)
        if "status" in tx.changes:
            self._report(turn)
        runnable += self._woken()
        if tx.changes.get("status") in FINAL_STATUSES and (nxt := self._next_queued(turn.record.session)):
            runnable.append((nxt, turn.record.session))  # the chain's hand-off
        return Commit(events=logged, cancel_reason=turn.record.cancel_reason, runnable=runnable)

    async def journal(self, turn_id: str, attempt_id: str | None, phase: Phase, **data: Any) -> None:
        turn = self._turn(turn_id)
        if attempt_id is not None and turn.record.attempt_id != attempt_id:
            raise StaleAttemptError(turn_id)
        self._set(turn, phase=str(phase), journal={**data, "attempt_id": attempt_id})

    async def request_cancel(self, turn_id: str, reason: str) -> Outcome:
        turn = self._turn(turn_id)
        s = self._session(turn.record.session)
        events, running = self._cancel([turn], reason)
        logged = self._log(s, events)
        self._refresh_session_status(s)
        return Outcome(events=logged, running=running, turn=turn.record, runnable=self._woken(), cascaded=self._rung())

    async def answer(self, turn_id: str, input_id: str, answer: Any, record: dict[str, Any]) -> Outcome:
        turn = self._turn(turn_id)
        rec = turn.record
        s = self._session(rec.session)
        rules.check_resumable(rec, input_id=input_id, generation=s.generation)
        turn.steps[input_step_id(turn_id, input_id)] = {"index": None, "data": copy.deepcopy(answer)}
        answered = ev.InputAnswered(
            turn_id,
            input_id=input_id,
            by=record.get("by"),
            name=record.get("name"),
            answer=copy.deepcopy(answer),
            via=record.get("via"),
        )
        rest = rules.after_answer(rec.pending or {}, input_id)
        if rest is not None:  # a sibling call's approval is still owed: the turn stays parked
            self._set(turn, pending=rest)
            return Outcome(events=self._log(s, [answered]), turn=turn.record)
        self._set(
            turn,
            status=TurnStatus.QUEUED,
            pending=None,
            journal={**rec.journal, "answered": {**record, "input_id": input_id}},
        )
        logged = self._log(s, [answered, ev.TurnStarted(turn_id, trigger="resume", text=rec.input.text)])
        self._refresh_session_status(s)
        return Outcome(events=logged, turn=turn.record)

    async def resume_parked(self, turn_id: str, reason: str, key: str) -> Outcome | None:
        turn = self._turn(turn_id)
        rec = turn.record
        if not rules.parked_on(rec, reason, key):
            return None
        s = self._session(rec.session)
        self._set(
            turn, status=TurnStatus.QUEUED, pending=None, waiting=0, journal={**rec.journal, "resumed": {reason: key}}
        )
        logged = self._log(s, [ev.TurnStarted(turn_id, trigger="resume", text=rec.input.text)])
        self._refresh_session_status(s)
        return Outcome(events=logged, turn=turn.record)

    async def reset(self, session: SessionRef, *, by: Any = None) -> Outcome:
        s = self._session(session)
        events, running = self._cancel(self._session_turns(session), CancelReason.RESET)
        logged = self._log(s, events)
        previous = f"{session.key}#g{s.generation}"
        s.archive[s.generation] = s.messages
        s.messages = []
        s.boundary, s.summary = 0, None
        s.generations += 1
        s.generation = s.generations
        self.resets.append((session, previous, by))
        logged += self._log(s, [ev.SessionReset("", previous_session=previous, generation=s.generation)])
        self._refresh_session_status(s)
        s.status = SessionStatus.NEW
        return Outcome(
            events=logged,
            running=running,
            previous_session=previous,
            generation=s.generation,
            runnable=self._woken(),
            cascaded=self._rung(),
        )

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
        s = self._session(session)
        branches.check_idle(busy=any(t.record.status in branches.BUSY for t in self._session_turns(session)))
        at, opener = memory_branches.fork_point(s, at=at, regenerate=regenerate)
        rules.check_start(turn_exists=turn_id in self._turns, parked=False)  # before anything changes
        logged = memory_branches.fork(s, at, opener, self._log)
        made = await self.create_turn(
            session, input or self._turn(opener).record.input, turn_id=turn_id, policy=policy, created_by=created_by
        )
        return Outcome(events=logged + made.events, turn=made.turn, generation=s.generation)

    async def switch(self, session: SessionRef, generation: int) -> Outcome:
        s = self._session(session)
        branches.check_idle(busy=any(t.record.status in branches.BUSY for t in self._session_turns(session)))
        logged = memory_branches.switch(s, generation, self._log)
        self._refresh_session_status(s)
        return Outcome(events=logged, generation=s.generation)

    async def pending(self, session: SessionRef) -> list[dict[str, Any]]:
        s = self._session(session)
        return [
            {"turn_id": t.record.turn_id, **(t.record.pending or {})}
            for t in self._session_turns(session)
            if is_parked(t.record) and t.record.generation == s.generation
        ]

    async def events(self, session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
        s = self._session(session)
        return [LoggedEvent(seq, e) for g, seq, e in s.events if seq > after and g == s.generation][:limit]

    async def next_queued(self, session: SessionRef) -> str | None:
        return self._next_queued(session)

    def _next_queued(self, session: SessionRef) -> str | None:
        for t in self._session_turns(session):
            if t.record.status in rules.CHAIN_BLOCKING:
                return t.record.turn_id if t.record.status == TurnStatus.QUEUED else None
        return None

    # -- test helpers ---------------------------------------------------------------------------

    def transcript(self, session: SessionRef) -> list[Message]:
        return list(self._session(session).messages)

    def session_status(self, session: SessionRef) -> SessionStatus:
        return self._session(session).status

    def steps(self, turn_id: str) -> dict[str, Any]:
        return dict(self._turn(turn_id).steps)
