"""Runs attempts of a turn: claim the lease (and load the turn with it), heartbeat, drive the
loop, retry within budget. The unit that settles the turn for good names the session's next
queued turn (``Commit.runnable``), which ``on_runnable`` dispatches: the chain's hand-off. The same code runs in-process and in a
django-q2 worker."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from typing import Any, Awaitable, Callable

from . import events as ev
from . import subagents
from .agent import Agent
from .control import RetryableTurnError, Signals
from .errors import StaleAttemptError
from .loop import Opening, TurnLoop
from .observe import TurnObserver
from .seams import EventSink, Model, Phase, SessionRef, SessionStore, TurnRecord, TurnState, TurnStatus, Tx

log = logging.getLogger(__name__)

Clock = Callable[[], float]


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class TurnExecutor:
    def __init__(
        self,
        *,
        store: SessionStore,
        sink: EventSink,
        agent_for: Callable[[str], Agent],
        model_for: Callable[[Agent], Model],
        clock: Clock,
        owner: str | None = None,
        lease_seconds: float = 10.0,
        max_attempts: int = 5,
        retry_delay: float = 0.5,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        on_signals: Callable[[str, Signals], Callable[[], None]] | None = None,
        on_runnable: Callable[[list[tuple[str, SessionRef]]], Awaitable[None]] | None = None,
        max_depth: int = subagents.MAX_DEPTH,
        max_fanout: int = subagents.MAX_FANOUT,
        observer: TurnObserver | None = None,
    ) -> None:
        self.store = store
        #: traces and metrics (``observe``); None: nothing watches, nothing is called
        self.observer = observer
        self.sink = sink
        self.agent_for = agent_for
        self.model_for = model_for
        self.clock = clock
        self.owner = owner or default_owner()
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.retry_delay = retry_delay
        self.sleep = sleep
        #: a host hook that wires a live cancel signal to ``Signals``; returns an unsubscribe
        self.on_signals = on_signals
        #: a host hook that dispatches the turns a unit made runnable (spawned children, a
        #: parent its last child woke); without one they wait for the host's sweep of queued turns
        self.on_runnable = on_runnable
        self.max_depth, self.max_fanout = max_depth, max_fanout

    async def drive(self, turn_id: str, *, on_claim: Callable[[bool], None] | None = None) -> TurnStatus | None:
        """Run the turn until it settles or parks; None if another worker holds it or an
        earlier turn of its session is unfinished (that turn hands over when it ends).
        ``on_claim`` hears whether the first claim took the lease, as soon as that is known."""
        while True:
            attempt_id = uuid.uuid4().hex
            opening = Opening(attempt_id, self.max_attempts)  # a store may commit it with the claim
            state = await self.store.claim_and_load(
                turn_id,
                owner=self.owner,
                attempt_id=attempt_id,
                now=self.clock(),
                lease_seconds=self.lease_seconds,
                opening=opening,
            )
            if on_claim is not None:
                on_claim(state is not None)
                on_claim = None
            if state is None:
                return None
            rec = state.turn
            if rec.attempts > self.max_attempts:
                await self._exhausted(rec, attempt_id, rec.attempts - 1)
                return TurnStatus.FAILED
            try:
                return await self._attempt(state, attempt_id, opening)
            except RetryableTurnError as exc:
                log.warning("turn %s attempt %s failed (%s); retrying", turn_id, attempt_id, exc)
                await self.store.release(turn_id, attempt_id=attempt_id)
                await self.sleep(self.retry_delay * min(rec.attempts, 8))

    async def _attempt(self, state: TurnState, attempt_id: str, opening: Opening | None = None) -> TurnStatus:
        turn_id = state.turn.turn_id
        agent = self.agent_for(state.turn.session.agent)
        signals = Signals()
        unsubscribe = self.on_signals(turn_id, signals) if self.on_signals else None
        beat = asyncio.create_task(self._heartbeat(turn_id, attempt_id, signals))
        try:
            loop = TurnLoop(
                agent=agent,
                store=self.store,
                sink=self.sink,
                model=self.model_for(agent),
                signals=signals,
                agent_for=self.agent_for,
                on_runnable=self.on_runnable,
                max_depth=self.max_depth,
                max_fanout=self.max_fanout,
                observer=self.observer,
            )
            if self.observer is None:
                return await loop.run(turn_id, attempt_id, state=state, opening=opening)
            # a later attempt, an answered question, a parent woken by its children: linked, not a child
            resumed = state.turn.attempts > 1 or bool(state.answers) or bool(state.steps)
            with self.observer.turn(state.turn, agent.name, resumed=resumed) as watch:
                status = await loop.run(turn_id, attempt_id, state=state, opening=opening)
                watch.record(status=str(status))
                return status
        finally:
            beat.cancel()
            if unsubscribe:
                unsubscribe()

    async def _heartbeat(self, turn_id: str, attempt_id: str, signals: Signals) -> None:
        every = max(self.lease_seconds / 3, 0.05)
        while True:
            await self.sleep(every)
            try:
                reason = await self.store.heartbeat(
                    turn_id, attempt_id=attempt_id, now=self.clock(), lease_seconds=self.lease_seconds
                )
            except StaleAttemptError:
                return
            except Exception:  # a blip: the next beat tries again, the lease has slack
                log.exception("turn %s: heartbeat failed", turn_id)
                continue
            if reason:
                signals.cancel(reason)

    async def _exhausted(self, rec: TurnRecord, attempt_id: str, attempts: int) -> None:
        turn_id = rec.turn_id
        message = f"retry budget exhausted after {attempts} attempts"

        def work(tx: Tx) -> None:
            tx.emit(ev.TurnFailed(turn_id, error=message))
            tx.journal(Phase.COMMITTED)
            tx.settle(TurnStatus.FAILED, error={"message": message, "reason": "budget_exhausted"})

        commit = await self.store.commit(turn_id, attempt_id, work)
        await self.sink.publish(rec.session, commit.events)
        if commit.runnable and self.on_runnable is not None:  # the chain's hand-off
            await self.on_runnable(commit.runnable)
