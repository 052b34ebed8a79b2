"""The host API: ``AgentSession`` — start, observe, result, turn, resume, cancel, reset,
pending — over any SessionStore, EventSink and Dispatcher. The one place a host (the site's
services, the CLI, schedules, unit tests) starts, answers, cancels or resets turns: it checks
``rules``, asks the store (which applies them again inside its transaction), publishes the
events the store logged, rings running turns and dispatches what became runnable."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from dataclasses import replace as with_fields
from typing import Any, Awaitable, Callable, Protocol, Sequence

from . import rules, subagents
from .agent import Agent
from .answers import Grant, check_answerer, grant_answer
from .control import Signals
from .errors import JuneError, NotFound, ResumeAuthorizationError
from .events import TurnEvent
from .executor import TurnExecutor
from .ids import new_turn_id, short_turn_id  # noqa: F401 (re-exported: importers of the host API)
from .local import FanoutSink, LocalBus, LocalDispatcher  # noqa: F401 (their old home: importers)
from .results import TurnParkedError, TurnResult
from .seams import (
    SETTLED_STATUSES,
    CancelReason,
    EventSink,
    Model,
    Outcome,
    SessionRef,
    SessionStore,
    TurnInput,
    TurnRecord,
    TurnStatus,
)

Observer = Callable[[TurnEvent], Any]


class Dispatcher(Protocol):
    """Gets a queued turn driven, now or soon, by some process."""

    async def dispatch(self, turn_id: str, session: SessionRef) -> None:
        """Hand the turn to a runner (idempotent: a duplicate is harmless)."""

    async def ring(self, turn_ids: Sequence[str]) -> None:
        """Tell whatever process runs these turns that a cancel request is stored for them
        (at-most-once: the stored request is honoured at their next checkpoint anyway)."""


async def call_directly(fn: Callable[[], Any]) -> Any:
    return fn()


@dataclass
class Runtime:
    store: SessionStore
    agents: dict[str, Agent]
    model_for: Callable[[Agent], Model]
    sink: EventSink | None = None
    dispatcher: Any = None
    clock: Callable[[], float] = time.time
    lease_seconds: float = 10.0
    max_attempts: int = 5
    poll_interval: float = 0.05
    #: subagents: how deep a tree of turns may grow, how many children one tool call may spawn
    max_depth: int = subagents.MAX_DEPTH
    max_fanout: int = subagents.MAX_FANOUT
    bus: LocalBus = field(default_factory=LocalBus)
    #: turn id -> the live Signals of its attempt running in this process
    live: dict[str, Signals] = field(default_factory=dict)
    #: runs the agent's synchronous hooks (``authorize_answer``), e.g. on the thread that may
    #: use the host's database; directly by default
    call_sync: Callable[[Callable[[], Any]], Awaitable[Any]] = call_directly
    #: traces and metrics (``observe.TurnObserver``); None: off, nothing is called
    observer: Any = None

    def __post_init__(self) -> None:
        self.fanout = FanoutSink(self.sink, self.bus) if self.sink else FanoutSink(self.bus)
        if self.dispatcher is None:
            self.dispatcher = LocalDispatcher()
        self._executor: TurnExecutor | None = None
        if isinstance(self.dispatcher, LocalDispatcher):
            self.dispatcher.executor = self.executor

    @property
    def executor(self) -> TurnExecutor:
        """What drives this runtime's turns, made when first asked for: a host's call that
        drives none (a start, a cancel, handed to another process's runner) makes none. Its
        hooks are this runtime's bound methods, a reference cycle that only the garbage
        collector would free."""
        if self._executor is None:
            self._executor = TurnExecutor(
                store=self.store,
                sink=self.fanout,
                agent_for=self.agent,
                model_for=self.model_for,
                clock=self.clock,
                lease_seconds=self.lease_seconds,
                max_attempts=self.max_attempts,
                on_signals=self._wire_signals,
                on_runnable=self._dispatch_runnable,
                max_depth=self.max_depth,
                max_fanout=self.max_fanout,
                observer=self.observer,
            )
        return self._executor

    async def _dispatch_runnable(self, runnable: list[tuple[str, SessionRef]]) -> None:
        for turn_id, ref in runnable:
            await self.dispatcher.dispatch(turn_id, ref)

    def _wire_signals(self, turn_id: str, signals: Signals) -> Callable[[], None]:
        self.live[turn_id] = signals

        def unsubscribe() -> None:
            if self.live.get(turn_id) is signals:
                del self.live[turn_id]

        return unsubscribe

    def agent(self, name: str) -> Agent:
        try:
            return self.agents[name]
        except KeyError:
            raise NotFound(f"no agent named {name!r}") from None

    def session(self, agent: str, key: str) -> AgentSession:
        self.agent(agent)
        return AgentSession(self, SessionRef(agent, key))


class AgentSession:
    def __init__(self, runtime: Runtime, ref: SessionRef) -> None:
        self.runtime = runtime
        self.ref = ref

    @property
    def store(self) -> SessionStore:
        return self.runtime.store

    async def start(self, input: str | TurnInput, *, replace: bool = False, turn_id: str | None = None) -> str:
        """Queue a turn and return its id without waiting."""
        return (await self.start_turn(input, replace=replace, turn_id=turn_id)).turn_id

    async def start_turn(
        self,
        input: str | TurnInput,
        *,
        replace: bool = False,
        turn_id: str | None = None,
        created_by: Any = None,
        instructions: str | None = None,
    ) -> TurnRecord:
        """``start``, returning the queued turn. ``created_by`` is the host's identity of the
        caller (kept with the turn, and as a new session's owner). ``instructions``: this turn's
        system prompt instead of the agent's (an eval's other version; kept in the turn's policy)."""
        if isinstance(input, str):
            input = TurnInput(text=input)
        observer = self.runtime.observer
        if observer is not None:  # the caller's trace, and when it queued, kept with the turn
            input = with_fields(input, trace=input.trace or observer.carrier(), queued_at=self.runtime.clock())
        agent = self.runtime.agent(self.ref.agent)
        policy = agent.policy_for(input.source)
        if instructions is not None:
            policy = {**policy, "system": instructions}
        outcome = await self.store.create_turn(
            self.ref,
            input,
            turn_id=turn_id or new_turn_id(),
            replace=replace,
            policy=policy,
            created_by=created_by,
        )
        assert outcome.turn is not None
        await self._after(outcome, CancelReason.REPLACED)
        await self.runtime.dispatcher.dispatch(outcome.turn.turn_id, self.ref)
        return outcome.turn

    def observe(self, cb: Observer, turn_id: str | None = None, *, replay: bool = False) -> Callable[[], None]:
        """Subscribe ``cb`` to this session's events (of ``turn_id`` only, if given).

        ``replay=True`` first delivers the logged events of that turn (an in-process
        catch-up); a subscriber that needs catch-up over the wire reads the event log."""

        def wanted(event: TurnEvent) -> bool:
            return turn_id is None or event.turn_id == turn_id

        if replay:
            buffered: list[TurnEvent] = []
            live = False

            def on_event(event: TurnEvent) -> Any:
                if not wanted(event):
                    return None
                if not live:
                    buffered.append(event)
                    return None
                return cb(event)

            unsubscribe = self.runtime.bus.subscribe(self.ref, on_event)

            async def deliver(event: TurnEvent) -> None:
                out = cb(event)
                if asyncio.iscoroutine(out):
                    await out

            async def catch_up() -> None:
                nonlocal live
                logged = [e.event for e in await self.store.events(self.ref, 0, limit=100_000) if wanted(e.event)]
                for event in logged:
                    await deliver(event)
                live = True
                for event in buffered:  # published while we read the log: skip what it held
                    if not (event.durable and event in logged):
                        await deliver(event)

            asyncio.get_running_loop().create_task(catch_up())
            return unsubscribe
        return self.runtime.bus.subscribe(self.ref, lambda e: cb(e) if wanted(e) else None)

    async def result(self, turn_id: str, *, timeout: float | None = None) -> TurnResult:
        """Wait until the turn is completed, suspended (for an answer), failed or cancelled."""
        deadline = None if timeout is None else time.monotonic() + timeout
        woke = asyncio.Event()
        unsubscribe = self.runtime.bus.subscribe(self.ref, lambda e: woke.set() if e.turn_id == turn_id else None)
        try:
            while True:
                rec = await self.store.get_turn(turn_id)
                # parked on children: not yet; parked on its model's batch: settled for now
                if rec.status in SETTLED_STATUSES and (not rec.waiting or rules.parked_on_model(rec)):
                    return TurnResult.of(rec)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"turn {turn_id} still {rec.status}")
                woke.clear()
                try:
                    await asyncio.wait_for(woke.wait(), self.runtime.poll_interval)
                except TimeoutError:
                    pass
        finally:
            unsubscribe()

    async def turn(self, input: str | TurnInput, *, replace: bool = False, timeout: float | None = None) -> TurnResult:
        """Start and await; non-interactive: raises TurnParkedError if the turn parks."""
        result = await self.result(await self.start(input, replace=replace), timeout=timeout)
        if result.status == TurnStatus.SUSPENDED:
            raise TurnParkedError(result)
        return result

    async def resume(
        self,
        turn_id: str,
        input_id: str,
        answer: Any,
        *,
        by: str | None = None,
        principal: Any = None,
        granted: Grant | None = None,
        via: str = "api",
        record: dict[str, Any] | None = None,
    ) -> TurnRecord:
        """Answer a parked request and replay the turn (403 / 409 / 422 as JuneErrors).

        ``by`` is the answerer's verified identity; a policy request is answered only with a
        grant, which the agent's ``authorize_answer(policy, scope, by, principal)`` gives now
        (unless the host passes ``granted``). ``record`` adds what the host keeps with the answer."""
        rec = await self.store.get_turn(turn_id)
        rules.check_turn_of(rec, self.ref)
        request = rules.check_resumable(rec, input_id=input_id)
        if granted is None and rules.needs_grant(request):
            hook = self.runtime.agent(self.ref.agent).authorize_answer
            granted = await grant_answer(
                {"request": request}, {"by": by, "principal": principal}, hook, call=self.runtime.call_sync
            )
        rules.check_answer(request, answer, by=by, granted=granted)
        outcome = await self.store.answer(
            turn_id, input_id, answer, {**(record or {}), "by": by, "via": via, "at": self.runtime.clock()}
        )
        await self._after(outcome, None)
        assert outcome.turn is not None
        if outcome.turn.status == TurnStatus.QUEUED:  # else it still waits on a sibling call's answer
            await self.runtime.dispatcher.dispatch(turn_id, self.ref)
        return outcome.turn

    async def may_answer(self, request: dict[str, Any], *, by: str | None, principal: Any = None) -> bool:
        """Whether ``by`` may answer ``request`` now (the inbox lists what its user may answer):
        the grant ``resume`` asks for (the agent's ``authorize_answer``) and the same answerer
        rule, by the same path; a hook that raises grants nothing."""
        granted = None
        if rules.needs_grant(request):
            hook = self.runtime.agent(self.ref.agent).authorize_answer
            try:
                granted = await grant_answer(
                    {"request": request}, {"by": by, "principal": principal}, hook, call=self.runtime.call_sync
                )
            except JuneError:
                return False
        try:
            check_answerer(request, by=by, granted=granted)
        except ResumeAuthorizationError:
            return False
        return True

    async def cancel(self, turn_id: str, *, reason: str = CancelReason.REQUESTED) -> TurnRecord:
        rec = await self.store.get_turn(turn_id)
        rules.check_turn_of(rec, self.ref)
        rules.check_cancellable(rec)  # the same answer over HTTP, the websocket and the admin
        outcome = await self.store.request_cancel(turn_id, str(reason))
        await self._after(outcome, str(reason))
        assert outcome.turn is not None
        if outcome.turn.status == TurnStatus.CANCELLED:
            await self._dispatch_next()
        return outcome.turn

    async def reset(self, *, by: Any = None) -> dict[str, Any]:
        """Archive the live generation; returns ``previous_session`` (``"key#gN"``) and ``generation``."""
        outcome = await self.store.reset(self.ref, by=by)
        await self._after(outcome, CancelReason.RESET)
        await self._dispatch_next()
        return {"previous_session": outcome.previous_session, "generation": outcome.generation}

    async def fork(
        self, at: int, input: str | TurnInput, *, turn_id: str | None = None, created_by: Any = None
    ) -> TurnRecord:
        """Edit: a new branch from just before message ``at`` (a person's opening message),
        live, with ``input`` queued on it. The branch left stays, to switch back to."""
        return await self._branch(
            input if isinstance(input, TurnInput) else TurnInput(text=input),
            at=at,
            turn_id=turn_id,
            created_by=created_by,
        )

    async def regenerate(
        self, turn_id: str, *, new_turn_id: str | None = None, source: str | None = None, created_by: Any = None
    ) -> TurnRecord:
        """The live branch's last turn sent again (its opening message, attachments included) as
        the first turn of a new branch forked just before it; from ``source`` (the channel asking
        now) if given, else the original's. The original's trace is not continued."""
        rec = await self.store.get_turn(turn_id)
        rules.check_turn_of(rec, self.ref)
        again = with_fields(rec.input, trace=None, queued_at=None, source=source or rec.input.source)
        return await self._branch(again, regenerate=turn_id, turn_id=new_turn_id, created_by=created_by)

    async def switch_branch(self, generation: int) -> int:
        """Make another branch of the conversation live (idle only); returns the live one."""
        outcome = await self.store.switch(self.ref, generation)
        await self._after(outcome, None)
        return outcome.generation if outcome.generation is not None else generation

    async def _branch(
        self,
        input: TurnInput,
        *,
        at: int | None = None,
        regenerate: str | None = None,
        turn_id: str | None,
        created_by: Any,
    ) -> TurnRecord:
        observer = self.runtime.observer
        if observer is not None:  # as ``start_turn``: the caller's trace, and when it queued
            input = with_fields(input, trace=input.trace or observer.carrier(), queued_at=self.runtime.clock())
        outcome = await self.store.fork(
            self.ref,
            input,
            turn_id=turn_id or new_turn_id(),
            at=at,
            regenerate=regenerate,
            policy=self.runtime.agent(self.ref.agent).policy_for(input.source),
            created_by=created_by,
        )
        assert outcome.turn is not None
        await self._after(outcome, None)
        await self.runtime.dispatcher.dispatch(outcome.turn.turn_id, self.ref)
        return outcome.turn

    async def pending(self) -> list[dict[str, Any]]:
        return await self.store.pending(self.ref)

    async def _after(self, outcome: Outcome, reason: str | None) -> None:
        """Publish what the store logged; ring the running turns that got a cancel request
        (the stored request is the truth; the ring makes it prompt, between deltas)."""
        if outcome.events:
            await self.runtime.fanout.publish(self.ref, outcome.events)
        await self.runtime._dispatch_runnable(outcome.runnable)
        if outcome.running or outcome.cascaded:
            for turn_id in outcome.running:
                signals = self.runtime.live.get(turn_id)
                if signals is not None and reason is not None:
                    signals.cancel(reason)
            for turn_id in outcome.cascaded:
                if (signals := self.runtime.live.get(turn_id)) is not None:
                    signals.cancel(rules.CASCADE)
            await self.runtime.dispatcher.ring(outcome.running + outcome.cascaded)

    async def _dispatch_next(self) -> None:
        nxt = await self.store.next_queued(self.ref)
        if nxt:
            await self.runtime.dispatcher.dispatch(nxt, self.ref)
