"""The turn loop: ask the model, run the tools it asked for, ask again — one checkpoint per
step, replayable from whatever the store says.

``TurnLoop.run`` drives one attempt of one turn. It is safe to call again for the same turn
at any time (a redelivery): the opening is not appended twice, finished steps are skipped, a
cached model step emits nothing, and the calls still owed a result are read off the
transcript.

Who owns what: the loop owns the attempt (``loop_state.Attempt``: the turn, its live view,
its policy, tools and limits), every checkpoint (``commit``: the store's unit, its events out,
the turns it made runnable handed on) and every ending (``settle``, ``fail``, ``cancel``,
``park``). The steps are collaborators it builds per attempt and calls: ``ModelStep``
(``loop_model``), ``ToolSteps`` (``loop_tools``; spawns through ``subagents``) and
``CompactionSteps`` (``loop_compaction``). Each reads the attempt and reaches back only
through ``loop_state.TurnOwner``: the checkpoint and the endings, nothing else of the loop.
The model step hands an overflow, or a last reply past the threshold, to the compaction
steps it is built with.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from . import subagents, units
from .agent import Agent
from .control import Signals
from .errors import StaleAttemptError
from .loop_compaction import CompactionSteps
from .loop_model import ModelStep
from .loop_state import Attempt
from .loop_tools import ToolSteps
from .messages import Role, ToolCall
from .observe import TurnObserver
from .position import NextKind, next_action
from .seams import (
    FINAL_STATUSES,
    Commit,
    EventSink,
    Model,
    SessionRef,
    SessionStore,
    TurnState,
    TurnStatus,
    Tx,
)
from .units import Opening, RecordingTx, opening_txn  # noqa: F401 (Opening: the executor's)

log = logging.getLogger(__name__)


def _no_agent(name: str) -> Agent:
    raise LookupError(name)


class TurnLoop:
    """Drives one attempt of one turn (``run``); the owner of its state (``self.attempt``), its
    checkpoints and its endings. Its steps are the collaborators ``run`` builds: ``self.model_step``,
    ``self.tool_steps``, ``self.compaction_steps`` (the ``TurnOwner`` they are given is this loop)."""

    attempt: Attempt
    model_step: ModelStep
    tool_steps: ToolSteps
    compaction_steps: CompactionSteps

    def __init__(
        self,
        *,
        agent: Agent,
        store: SessionStore,
        sink: EventSink,
        model: Model,
        signals: Signals | None = None,
        agent_for: Callable[[str], Agent] | None = None,
        on_runnable: Callable[[list[tuple[str, SessionRef]]], Awaitable[None]] | None = None,
        max_depth: int = subagents.MAX_DEPTH,
        max_fanout: int = subagents.MAX_FANOUT,
        observer: TurnObserver | None = None,
    ) -> None:
        self.agent = agent
        #: traces and metrics (``observe``): None unless configured
        self.observer = observer
        self.store = store
        self.sink = sink
        self.model = model
        self.signals = signals or Signals()
        #: subagents: the agents a tool may spawn and how far; who dispatches the turns a unit made runnable
        self.spawn_rules = subagents.SpawnRules(
            agent_for=agent_for or (lambda name: agent if name == agent.name else _no_agent(name)),
            max_depth=max_depth,
            max_fanout=max_fanout,
        )
        self.on_runnable = on_runnable

    # -- the loop -----------------------------------------------------------------------------

    async def run(
        self, turn_id: str, attempt_id: str | None, *, state: TurnState | None = None, opening: Opening | None = None
    ) -> TurnStatus:
        """Drive the turn from where the store says it is; return the status it ended in.
        ``state``: what the attempt's claim already loaded (``SessionStore.claim_and_load``);
        ``opening``: the opening offered to that claim, which ``state.opened`` says it committed.

        Raises RetryableTurnError when a redelivery may succeed; returns quietly (with the
        status it believes) when another attempt took the turn over (StaleAttemptError).
        """
        state = state if state is not None else await self.store.load(turn_id)
        turn = state.turn
        if turn.status in FINAL_STATUSES:
            return turn.status
        if turn.cancel_reason:
            self.signals.cancel(turn.cancel_reason)
        policy = turn.policy or self.agent.policy_for(turn.input.source)
        tools, specs = await self.agent.tools_for_turn(policy)
        # a child turn spends a share of its parent's budget (``limits``: a tree keeps its root's)
        assert self.agent.limits is not None  # limits_config set them (the site's defaults at least)
        self.attempt = a = Attempt(
            state,
            attempt_id,
            compaction=self.agent.compaction,
            window=self.agent.compaction.window(self.model),
            policy=policy,
            tools=tools,
            specs=specs,
            limits=self.agent.limits.within((turn.input.target or {}).get("budget")),
        )
        self.compaction_steps = CompactionSteps(a, self, model=self.model, observer=self.observer)
        self.tool_steps = ToolSteps(
            a,
            self,
            store=self.store,
            sink=self.sink,
            signals=self.signals,
            spawn_rules=self.spawn_rules,
            observer=self.observer,
        )
        self.model_step = ModelStep(
            a,
            self,
            model=self.model,
            store=self.store,
            sink=self.sink,
            signals=self.signals,
            compaction_steps=self.compaction_steps,
            observer=self.observer,
            model_name=self.agent.model if not isinstance(self.agent.model, tuple) else " | ".join(self.agent.model),
        )
        try:
            if state.opened is not None and opening is not None and opening.recorded is not None:
                a.announced = opening.key
                await self._committed(state.opened, opening.recorded)
            # the steps are driven here, not in a coroutine of their own: every resumption of a
            # streamed call passes through each frame of the chain that awaits it
            first = True
            while True:
                nxt = next_action(a.transcript, a.turn.turn_id)
                if nxt.kind == NextKind.OPEN:
                    if self.signals.cancel_reason:
                        return await self.cancel(())
                    await self._open()
                elif nxt.kind == NextKind.SETTLE:
                    text = a.transcript[nxt.index].text
                    if not self.compaction_steps.due():
                        return await self.settle(text)
                    status = await self.compaction_steps.compact("proactive", settle_text=text)
                    if status is not None:
                        return status
                elif nxt.kind == NextKind.MODEL:
                    if self.signals.cancel_reason:
                        return await self.cancel(())
                    status = await self.model_step.run(a.base + nxt.index)
                    if status is not None:
                        return status
                else:
                    status = await self.tool_steps.run(a.base + nxt.index, nxt.calls, replay=first)
                    if status is not None:
                        return status
                first = False
        except StaleAttemptError:
            log.info("turn %s: attempt %s lost its lease; stopping without output", turn_id, attempt_id)
            return TurnStatus.RUNNING

    async def _open(self) -> None:
        a = self.attempt

        def work(tx: RecordingTx) -> None:
            a.announced = opening_txn(tx, a.turn, a.attempt_id)

        await self.commit(work)

    # -- checkpoints (``TurnOwner``) ----------------------------------------------------------

    async def commit(
        self, work: Callable[[RecordingTx], None], *, tool_code: bool = False, dispatch: bool = True
    ) -> Commit:
        """One checkpoint. ``tool_code``: ``work`` runs a sync tool, whose own writes (through
        the store's handle) commit with it (``SessionStore.atomic``); otherwise ``work`` only
        records through ``tx`` (``SessionStore.commit``)."""
        a = self.attempt
        recorder_box: list[RecordingTx] = []

        def unit(tx: Tx) -> None:
            rec = RecordingTx(tx, a.base + len(a.transcript))
            recorder_box.append(rec)
            work(rec)

        run = self.store.atomic if tool_code else self.store.commit
        commit = await run(a.turn.turn_id, a.attempt_id, unit)
        return await self._committed(commit, recorder_box[-1], dispatch=dispatch)

    async def _committed(self, commit: Commit, rec: RecordingTx, *, dispatch: bool = True) -> Commit:
        """What follows a checkpoint's commit: the attempt takes up what it wrote; its cancel
        request, its events and the turns it made runnable go out."""
        self.attempt.take_up(rec)
        if commit.cancel_reason:
            self.signals.cancel(commit.cancel_reason)
        if commit.events:
            await self.sink.publish(self.attempt.turn.session, commit.events)
        if dispatch:
            await self.dispatch(commit.runnable)
        return commit

    async def dispatch(self, runnable: list[tuple[str, SessionRef]]) -> None:
        if runnable and self.on_runnable is not None:
            await self.on_runnable(runnable)

    # -- endings (``TurnOwner``) --------------------------------------------------------------

    async def park(
        self,
        call: ToolCall,
        step_id: str,
        request: dict[str, Any],
        also: list[tuple[ToolCall, dict[str, Any]]] | None = None,
    ) -> TurnStatus:
        """Park on ``request`` (and on ``also``: the same step's later calls' approvals, asked
        together; the turn resumes once every one is answered)."""
        a = self.attempt
        turn = a.turn
        asks = [(call, request), *(also or [])]
        pending = {
            "request": request,
            **({"requests": [ask for _, ask in asks]} if also else {}),
            "call_id": call.id,
            "call": call.to_json(),
            "step": step_id,
            "opening_text": turn.input.text,
            "policy": a.policy,
            "inbound": turn.input.to_json(),
        }

        usage = a.usage_with({})  # what it spent so far: the console shows a parked turn's too
        await self.commit(lambda tx: units.park_txn(tx, turn.turn_id, asks, pending, usage))
        return TurnStatus.SUSPENDED

    async def settle(self, text: str) -> TurnStatus:
        a = self.attempt
        usage = a.usage_with({})
        # the turn's answer was its last model call's if that call was made at a limit
        mine = [i for i, m in enumerate(a.transcript) if m.role == Role.ASSISTANT and m.turn_id == a.turn.turn_id]
        limited = a.limit_reached(a.transcript[: mine[-1]]) if mine else None
        await self.commit(lambda tx: units.settle_txn(tx, a.turn.turn_id, text, usage, limited=limited))
        return TurnStatus.COMPLETED

    async def fail(self, error: str, *, phase: str | None = None, step: str | None = None) -> TurnStatus:
        a = self.attempt
        usage = a.usage_with({})  # a failed turn spent too
        await self.commit(lambda tx: units.fail_txn(tx, a.turn.turn_id, error, phase, step, usage))
        return TurnStatus.FAILED

    async def cancel(self, owed: tuple[ToolCall, ...], *, index: int = -1, discarded: str = "") -> TurnStatus:
        a = self.attempt
        reason = self.signals.cancel_reason or "requested"
        usage = a.usage_with({})  # a cancelled turn spent too (it showed "0 input, 0 output")
        await self.commit(lambda tx: units.cancel_txn(tx, a.turn.turn_id, owed, index, reason, discarded, usage))
        return TurnStatus.CANCELLED
