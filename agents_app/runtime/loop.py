"""The turn loop: ask the model, run the tools it asked for, ask again — one checkpoint per
step, replayable from whatever the store says.

``TurnLoop.run`` drives one attempt of one turn. It is safe to call again for the same turn
at any time (a redelivery): the opening is not appended twice, finished steps are skipped, a
cached model step emits nothing, and the calls still owed a result are read off the
transcript.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from . import events as ev
from . import limits, subagents, units, view
from .agent import Agent
from .control import RetryableTurnError, Signals
from .errors import StaleAttemptError
from .loop_compaction import CompactionSteps
from .loop_tools import ToolSteps
from .messages import Message, Role, ToolCall, model_step_id
from .model import (
    ABNORMAL_STOPS,
    ContextOverflowError,
    ModelError,
    ModelReply,
    ModelRequest,
    ReasoningDelta,
    StopReason,
    TextDelta,
)
from .observe import TurnObserver
from .position import NextKind, next_action
from .seams import (
    FINAL_STATUSES,
    Commit,
    EventSink,
    Model,
    Phase,
    SessionRef,
    SessionStore,
    TurnRecord,
    TurnState,
    TurnStatus,
    Tx,
)
from .units import Opening, RecordingTx, opening_txn, stream_key  # noqa: F401 (Opening: the executor's)

log = logging.getLogger(__name__)


def _no_agent(name: str) -> Agent:
    raise LookupError(name)


class TurnLoop(CompactionSteps, ToolSteps):
    """One attempt of one turn. The compaction steps and the tool steps are its mixins
    (``loop_compaction.py``, ``loop_tools.py``): one class, three files."""

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
        #: traces and metrics (``observe``): None unless configured; ``_watch``: the model call's
        self.observer = observer
        self._watch: Any = None
        self.store = store
        self.sink = sink
        self.model = model
        self.signals = signals or Signals()
        #: subagents: the agents a tool may spawn, who dispatches the turns a unit made runnable
        self.agent_for = agent_for or (lambda name: agent if name == agent.name else _no_agent(name))
        self.on_runnable = on_runnable
        self.max_depth, self.max_fanout = max_depth, max_fanout
        self._history = None

    # -- plumbing -----------------------------------------------------------------------------

    async def _commit(self, work: Callable[[Any], None], *, tool_code: bool = False, dispatch: bool = True) -> Commit:
        """One checkpoint. ``tool_code``: ``work`` runs a sync tool, whose own writes (through
        the store's handle) commit with it (``SessionStore.atomic``); otherwise ``work`` only
        records through ``tx`` (``SessionStore.commit``)."""
        recorder_box: list[RecordingTx] = []

        def unit(tx: Tx) -> None:
            rec = RecordingTx(tx, self.base + len(self.transcript))
            recorder_box.append(rec)
            work(rec)

        run = self.store.atomic if tool_code else self.store.commit
        commit = await run(self.turn.turn_id, self.attempt_id, unit)
        return await self._committed(commit, recorder_box[-1], dispatch=dispatch)

    async def _committed(self, commit: Commit, rec: RecordingTx, *, dispatch: bool = True) -> Commit:
        """What follows a checkpoint's commit: the loop's transcript and steps take up what it
        wrote; its cancel request, its events and the turns it made runnable go out."""
        self.transcript.extend(rec.appended)
        self.state.steps.update(rec.steps)
        if rec.moved is not None:
            self._moved(*rec.moved)
        if commit.cancel_reason:
            self.signals.cancel(commit.cancel_reason)
        if commit.events:
            await self.sink.publish(self.turn.session, commit.events)
        if dispatch:
            await self._dispatch(commit.runnable)
        return commit

    async def _dispatch(self, runnable: list[tuple[str, SessionRef]]) -> None:
        if runnable and self.on_runnable is not None:
            await self.on_runnable(runnable)

    @property
    def cancel_reason(self) -> str | None:
        return self.signals.cancel_reason

    # -- the loop -----------------------------------------------------------------------------

    async def run(self, turn_id: str, attempt_id: str | None, *, state: TurnState | None = None,
                  opening: Opening | None = None) -> TurnStatus:
        """Drive the turn from where the store says it is; return the status it ended in.
        ``state``: what the attempt's claim already loaded (``SessionStore.claim_and_load``);
        ``opening``: the opening offered to that claim, which ``state.opened`` says it committed.

        Raises RetryableTurnError when a redelivery may succeed; returns quietly (with the
        status it believes) when another attempt took the turn over (StaleAttemptError).
        """
        self.attempt_id = attempt_id
        self._announced: str | None = None  # the model step a checkpoint of this attempt announced
        self.state: TurnState = state if state is not None else await self.store.load(turn_id)
        self.turn: TurnRecord = self.state.turn
        self.transcript = self.state.transcript
        self.base, self.boundary, self.summary_at = self.state.base, self.state.boundary, self.state.summary
        self.compaction = self.agent.compaction
        self.window = self.compaction.window(self.model)
        if self.turn.status in FINAL_STATUSES:
            return self.turn.status
        if self.turn.cancel_reason:
            self.signals.cancel(self.turn.cancel_reason)
        self.policy = self.turn.policy or self.agent.policy_for(self.turn.input.source)
        self.tools, self.specs = await self.agent.tools_for_turn(self.policy)
        # a child turn spends a share of its parent's budget (``limits``: a tree keeps its root's)
        assert self.agent.limits is not None  # limits_config set them (the site's defaults at least)
        self.limits = self.agent.limits.within((self.turn.input.target or {}).get("budget"))
        try:
            if self.state.opened is not None and opening is not None and opening.recorded is not None:
                self._announced = opening.key
                await self._committed(self.state.opened, opening.recorded)
            return await self._drive()
        except StaleAttemptError:
            log.info("turn %s: attempt %s lost its lease; stopping without output", turn_id, attempt_id)
            return TurnStatus.RUNNING

    async def _drive(self) -> TurnStatus:
        first = True
        while True:
            nxt = next_action(self.transcript, self.turn.turn_id)
            if nxt.kind == NextKind.OPEN:
                if self.cancel_reason:
                    return await self._cancel(())
                await self._open()
            elif nxt.kind == NextKind.SETTLE:
                text = self.transcript[nxt.index].text
                if not self._proactive_due():
                    return await self._settle(text)
                status = await self._compact("proactive", settle_text=text)
                if status is not None:
                    return status
            elif nxt.kind == NextKind.MODEL:
                if self.cancel_reason:
                    return await self._cancel(())
                status = await self._model_step(self.base + nxt.index)
                if status is not None:
                    return status
            else:
                status = await self._tool_steps(self.base + nxt.index, nxt.calls, replay=first)
                if status is not None:
                    return status
            first = False

    async def _open(self) -> None:
        def work(tx: RecordingTx) -> None:
            self._announced = opening_txn(tx, self.turn, self.attempt_id)

        await self._commit(work)

    # -- model step ---------------------------------------------------------------------------

    def _stream_key(self, step_id: str) -> str:
        return stream_key(self.turn.turn_id, step_id, self.attempt_id)

    def _provider_next(self, tx: RecordingTx, index: int) -> None:
        """In a checkpoint after which the loop goes straight to the model step whose reply lands
        at ``index`` (a step's last tool result; the opening's is ``opening_txn``): record
        provider_started with that step's stream key in it, so the step needs no journal write
        of its own. Recovery reads the position off the transcript, not the phase: a crash
        before the stream opens re-drives the same model step either way."""
        key = self._stream_key(model_step_id(index))
        tx.journal(Phase.PROVIDER_STARTED, stream_key=key)
        self._announced = key

    async def _model_step(self, index: int) -> TurnStatus | None:
        if self.observer is None:
            return await self._model_step_run(index)
        with self.observer.model_call(self.turn, self.agent.model) as self._watch:
            try:
                return await self._model_step_run(index)
            finally:
                self._watch = None

    async def _model_step_run(self, index: int) -> TurnStatus | None:
        turn = self.turn
        step_id = model_step_id(index)
        stream_key = self._stream_key(step_id)
        journal: Any = None
        if self._announced != stream_key:
            # no checkpoint of this attempt announced this step (a resumed model step, or after
            # a compaction): recorded while the provider starts, not before it; a real model's
            # first token takes far longer than the write, which lands before this step commits
            journal = asyncio.ensure_future(
                self.store.journal(turn.turn_id, self.attempt_id, Phase.PROVIDER_STARTED, stream_key=stream_key)
            )
        # a turn at its limit makes this call its last: no tools, and told why (``limits``)
        last = self._limit_reached(self.transcript)
        system = self.policy.get("system", "")
        request = ModelRequest(
            system=f"{system}\n\n{self.limits.note(last)}".strip() if last else system,
            messages=self._request_messages(),
            tools=self.specs,
            stream_key=stream_key,
            tools_allowed=not last,
        )
        reply: ModelReply | None = None
        overflow: str | None = None
        stream = self.model.stream(request)
        streamed: list[str] = []  # the text so far: a cancel records it as discarded
        try:
            try:
                async for chunk in stream:
                    if isinstance(chunk, TextDelta):
                        streamed.append(chunk.text)
                        await self.sink.delta(turn.session, ev.MessageDelta(turn.turn_id, text=chunk.text))
                    elif isinstance(chunk, ReasoningDelta):
                        await self.sink.delta(turn.session, ev.ReasoningDelta(turn.turn_id, text=chunk.text))
                    elif isinstance(chunk, ModelReply):
                        reply = chunk
                    if self.cancel_reason:
                        break
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
                if journal is not None:
                    await journal  # a lost lease (StaleAttemptError) surfaces here, before any commit
        except ContextOverflowError as exc:
            if not self.compaction.enabled:
                return await self._fail(str(exc), phase="model", step=step_id)
            overflow = str(exc)
        except ModelError as exc:
            if exc.retryable:
                raise RetryableTurnError(f"model: {exc}") from exc
            return await self._fail(str(exc), phase="model", step=step_id)
        if self.cancel_reason:
            return await self._cancel((), discarded="".join(streamed)[: ev.DISCARDED_MAX])
        if overflow is not None or (
            reply is not None and reply.stop_reason == StopReason.CONTEXT_OVERFLOW and self.compaction.enabled
        ):
            return await self._overflowed(step_id)
        if reply is None:
            raise RetryableTurnError("model: the stream ended without a reply")
        if reply.is_empty and reply.stop_reason in ABNORMAL_STOPS:
            return await self._fail(
                f"the model stopped ({reply.stop_reason}) without a reply", phase="model", step=step_id
            )
        if last and not reply.text:
            return await self._fail(f"the turn reached its limit of {limits.NAMES[last]} and its last model call "
                                    "gave no answer", phase="model", step=step_id)
        message = Message(
            role=Role.ASSISTANT,
            text=reply.text,
            turn_id=turn.turn_id,
            tool_calls=() if last else reply.tool_calls,  # (a model that calls a tool it was not offered)
            blocks=reply.blocks,
            usage=dict(reply.usage),
        )
        usage = self._usage_with(reply.usage, calls=1)
        if self._watch is not None:
            self._watch.record(usage=reply.usage, stop_reason=str(reply.stop_reason))
        # the turn's last reply: settle now, or first compact (a step of this turn)
        compact_next = not message.tool_calls and self._proactive_due(message, request)

        def work(tx: RecordingTx) -> None:
            at = tx.append(message)
            tx.step(step_id, at)
            if message.text:
                tx.emit(ev.MessageCompleted(turn.turn_id, text=message.text, index=at))
            for call in message.tool_calls:
                tx.emit(ev.ActionRequested(turn.turn_id, call=call.to_json()))
            if message.tool_calls:
                tx.journal(Phase.TOOL_REQUEST_RECORDED, tool_request=message.tool_calls[0].to_json(), index=at)
            elif compact_next:
                tx.journal(Phase.BEFORE_PROVIDER)
            else:
                self._settle_txn(tx, message.text, usage, limited=last)

        await self._commit(work)
        return TurnStatus.COMPLETED if not message.tool_calls and not compact_next else None

    def _request_messages(self) -> tuple[Message, ...]:
        """The live view as the model sees it (``view.request_messages``); the earlier turns'
        part is kept for the attempt's next steps."""
        self._history, messages = view.request_messages(
            self.transcript, self.turn, base=self.base, boundary=self.boundary, summary_at=self.summary_at,
            history=self._history)
        return messages

    # -- endings ------------------------------------------------------------------------------

    async def _park(self, call: ToolCall, step_id: str, request: dict[str, Any],
                    also: list[tuple[ToolCall, dict[str, Any]]] | None = None) -> TurnStatus:
        """Park on ``request`` (and on ``also``: the same step's later calls' approvals, asked
        together; the turn resumes once every one is answered)."""
        turn = self.turn
        asks = [(call, request), *(also or [])]
        pending = {
            "request": request,
            **({"requests": [ask for _, ask in asks]} if also else {}),
            "call_id": call.id,
            "call": call.to_json(),
            "step": step_id,
            "opening_text": turn.input.text,
            "policy": self.policy,
            "inbound": turn.input.to_json(),
        }

        usage = self._usage_with({})  # what it spent so far: the console shows a parked turn's too
        await self._commit(lambda tx: units.park_txn(tx, turn.turn_id, asks, pending, usage))
        return TurnStatus.SUSPENDED

    def _settle_txn(self, tx: RecordingTx, text: str, usage: dict[str, Any], *, limited: str | None = None) -> None:
        units.settle_txn(tx, self.turn.turn_id, text, usage, limited=limited)

    async def _settle(self, text: str) -> TurnStatus:
        usage = self._usage_with({})
        # the turn's answer was its last model call's if that call was made at a limit
        mine = [i for i, m in enumerate(self.transcript) if m.role == Role.ASSISTANT and m.turn_id == self.turn.turn_id]
        limited = self._limit_reached(self.transcript[:mine[-1]]) if mine else None
        await self._commit(lambda tx: self._settle_txn(tx, text, usage, limited=limited))
        return TurnStatus.COMPLETED

    def _limit_reached(self, messages: list[Message]) -> str | None:
        """The limit the turn's next model call (after ``messages``) must be the last for."""
        return self.limits.reached(*self._spent(messages))

    def _spent(self, messages: list[Message]) -> tuple[int, int]:
        return limits.spent(messages, self.turn.turn_id, subagents.children_usage(self.state.spawned))

    def children_budget(self, n: int) -> dict[str, int]:
        """Each of ``n`` new children's share of what this turn has left (ValueError: too little)."""
        return limits.shares(self.limits, *self._spent(self.transcript), len(self.state.spawned), n)

    async def _fail(self, error: str, *, phase: str | None = None, step: str | None = None) -> TurnStatus:
        usage = self._usage_with({})  # a failed turn spent too
        await self._commit(lambda tx: units.fail_txn(tx, self.turn.turn_id, error, phase, step, usage))
        return TurnStatus.FAILED

    async def _cancel(self, owed: tuple[ToolCall, ...], *, index: int = -1, discarded: str = "") -> TurnStatus:
        reason = self.cancel_reason or "requested"
        usage = self._usage_with({})  # a cancelled turn spent too (it showed "0 input, 0 output")
        await self._commit(lambda tx: units.cancel_txn(tx, self.turn.turn_id, owed, index, reason, discarded, usage))
        return TurnStatus.CANCELLED
