"""The in-memory store's tables and the rules it applies across them: sessions and turns, the
event log, a session's status, and the tree of subagent turns (cancel cascades down, a settled
child reports up). ``InMemorySessionStore`` (``memory.py``) is the seam over them."""

from __future__ import annotations

from typing import Any

from . import events as ev
from . import rules, subagents
from .errors import NotFound
from .memory_rows import SessionRow, TurnRow
from .seams import FINAL_STATUSES, ChildTurn, LoggedEvent, SessionRef, SessionStatus, TurnRecord, TurnStatus

UNFINISHED = (TurnStatus.QUEUED, TurnStatus.RUNNING)


class MemoryTables:
    def __init__(self) -> None:
        self._sessions: dict[SessionRef, SessionRow] = {}
        self._turns: dict[str, TurnRow] = {}
        #: each session's turns not settled for good, in order (``_session_turns``)
        self._unsettled: dict[SessionRef, list[TurnRow]] = {}
        self._order = 0
        self._runnable: list[tuple[str, SessionRef]] = []
        self._cascaded: list[str] = []
        #: (session, previous_session, by) of every reset, for tests
        self.resets: list[tuple[SessionRef, str, Any]] = []

    # -- the tables --------------------------------------------------------------------------------

    def _session(self, ref: SessionRef) -> SessionRow:
        if ref not in self._sessions:
            self._sessions[ref] = SessionRow(ref)
        return self._sessions[ref]

    def _turn(self, turn_id: str) -> TurnRow:
        try:
            return self._turns[turn_id]
        except KeyError:
            raise NotFound(f"no turn {turn_id}") from None

    def _log(self, session: SessionRow, events: list[ev.TurnEvent]) -> list[LoggedEvent]:
        logged = []
        for event in events:
            session.seq += 1
            session.events.append((session.generation, session.seq, event))
            logged.append(LoggedEvent(session.seq, event))
        return logged

    def _set(self, turn: TurnRow, **changes: Any) -> None:
        turn.record = turn.record.evolve(**changes)

    def _session_turns(self, ref: SessionRef) -> list[TurnRow]:
        """The session's turns in order, less those settled for good (a final status, no
        children owed): no rule looks at them again, so a step costs the same after 10 or
        10,000 turns of the session."""
        turns = [t for t in self._unsettled.get(ref, ()) if t.record.status not in FINAL_STATUSES or t.record.waiting]
        self._unsettled[ref] = turns
        return turns

    def _add(self, turn: TurnRow) -> None:
        self._turns[turn.record.turn_id] = turn
        self._unsettled.setdefault(turn.record.session, []).append(turn)

    def _refresh_session_status(self, session: SessionRow) -> None:
        turns = self._session_turns(session.ref)
        if any(is_parked(t.record) and t.record.generation == session.generation for t in turns):
            session.status = SessionStatus.SUSPENDED
        elif any(t.record.status in UNFINISHED or t.record.waiting for t in turns):
            session.status = SessionStatus.RUNNING
        elif session.messages:
            session.status = SessionStatus.IDLE
        else:
            session.status = SessionStatus.NEW

    def _cancel(self, turns: list[TurnRow], reason: str) -> tuple[list[ev.TurnEvent], list[str]]:
        """``rules``: settle what a cancel settles at once, hand running turns the request; the
        unfinished children of both get ``rules.CASCADE`` first (children before parents; the
        running ones are in ``self._cascaded``, to ring)."""
        events: list[ev.TurnEvent] = []
        running: list[str] = []
        for t in turns:
            now = rules.cancel_now(t.record.status, reason=reason, waiting=t.record.waiting)
            if now or rules.gets_request(t.record):
                self._cascaded += self._cascade(t.record.turn_id)
            if now:
                self._set(
                    t,
                    status=TurnStatus.CANCELLED,
                    cancel_reason=reason,
                    error={"reason": reason},
                    pending=None,
                    waiting=0,
                )
                events.append(ev.TurnCancelled(t.record.turn_id, reason=reason))
                if reason != rules.CASCADE:
                    self._report(t)
            elif rules.gets_request(t.record):
                self._set(t, cancel_reason=reason)
                running.append(t.record.turn_id)
        return events, running

    def _cascade(self, parent: str) -> list[str]:
        """Cancel the unfinished children of ``parent`` (logged in their own sessions); the
        running ones to ring."""
        children = [
            t for t in self._turns.values() if t.record.parent == parent and t.record.status not in FINAL_STATUSES
        ]
        running: list[str] = []
        by_session: dict[SessionRef, list[TurnRow]] = {}
        for child in children:
            by_session.setdefault(child.record.session, []).append(child)
        for ref, group in by_session.items():
            s = self._session(ref)
            events, ring = self._cancel(group, rules.CASCADE)
            self._log(s, events)
            self._refresh_session_status(s)
            running += ring
        return running

    def _report(self, child: TurnRow) -> None:
        """A child settled: store its result under its parent's step (once) and wake the parent
        when it was the last child owed and the parent still waits."""
        rec = child.record
        parent = self._turns.get(rec.parent or "")
        if parent is None or rec.status not in FINAL_STATUSES:
            return
        target = rec.input.target or {}
        step = subagents.step_key(parent.record.turn_id, target["call_id"], target["index"])
        if step in parent.steps:
            return
        parent.steps[step] = {
            "index": None,
            "data": subagents.result_of(rec.turn_id, rec.status, rec.text, rec.error, rec.usage),
        }
        p = parent.record
        if p.status != TurnStatus.SUSPENDED or p.waiting <= 0:
            return
        if p.waiting > 1:
            self._set(parent, waiting=p.waiting - 1)
            return
        # a fresh retry budget: the park ended its attempt well (``attempts`` counts claims)
        self._set(parent, waiting=0, status=TurnStatus.QUEUED, pending=None, attempts=0)
        self._refresh_session_status(self._session(p.session))
        self._runnable.append((p.turn_id, p.session))

    def _woken(self) -> list[tuple[str, SessionRef]]:
        woken, self._runnable = self._runnable, []
        return woken

    def _rung(self) -> list[str]:
        rung, self._cascaded = self._cascaded, []
        return rung

    def _create_child(self, parent: TurnRow, child: ChildTurn) -> tuple[str, SessionRef] | None:
        if child.turn_id in self._turns:
            return None
        s = self._session(child.session)
        self._order += 1
        record = TurnRecord(
            turn_id=child.turn_id,
            session=child.session,
            status=TurnStatus.QUEUED,
            input=child.input,
            generation=s.generation,
            policy=child.policy,
            parent=parent.record.turn_id,
            depth=child.depth,
        )
        self._add(TurnRow(record, self._order))
        self._set(parent, waiting=parent.record.waiting + 1)
        self._refresh_session_status(s)
        return child.turn_id, child.session


def is_parked(rec: TurnRecord) -> bool:
    """Parked on an input request (a turn parked on its children is not waiting for a person)."""
    return rec.status == TurnStatus.SUSPENDED and not rec.waiting
