"""The model step of the turn loop (``ModelStep``, a collaborator of ``loop.TurnLoop``): one
streamed call to the agent's model, its deltas out as they come, its reply recorded by one
checkpoint. It reads the attempt and checkpoints or ends the turn through its owner
(``loop_state``); an overflow or a reply past the threshold is the compaction steps' to handle."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from . import events as ev
from . import limits, units
from .control import RetryableTurnError, Signals
from .loop_compaction import CompactionSteps
from .loop_state import Attempt, TurnOwner
from .messages import Message, Role, model_step_id
from .model import (
    ABNORMAL_STOPS,
    ContextOverflowError,
    ModelError,
    ModelParked,
    ModelReply,
    ModelRequest,
    ReasoningDelta,
    StopReason,
    TextDelta,
)
from .observe import TurnObserver, Watch
from .seams import EventSink, Model, Phase, SessionStore, TurnStatus
from .units import RecordingTx


class ModelStep:
    """The model steps of one attempt: ``model`` streams, ``sink`` carries its deltas,
    ``signals`` cut it short on a cancel; ``store`` journals a step no checkpoint announced."""

    def __init__(
        self,
        attempt: Attempt,
        owner: TurnOwner,
        *,
        model: Model,
        store: SessionStore,
        sink: EventSink,
        signals: Signals,
        compaction_steps: CompactionSteps,
        observer: TurnObserver | None,
        model_name: str | None,
    ) -> None:
        self.attempt = attempt
        self.owner = owner
        self.model = model
        self.store = store
        self.sink = sink
        self.signals = signals
        self.compaction_steps = compaction_steps
        self.observer = observer
        self.model_name = model_name

    def run(self, index: int) -> Awaitable[TurnStatus | None]:
        """The model step whose reply lands at ``index``: None when the turn goes on (to its
        tools, or to a compaction before it settles), else the status it ended in. Without an
        observer the caller awaits the step itself: no frame of this one's on every resumption
        of the streamed call."""
        if self.observer is None:
            return self._run(index, None)
        return self._watched(self.observer, index)

    async def _watched(self, observer: TurnObserver, index: int) -> TurnStatus | None:
        with observer.model_call(self.attempt.turn, self.model_name) as watch:
            return await self._run(index, watch)

    async def _run(self, index: int, watch: Watch | None) -> TurnStatus | None:
        a = self.attempt
        turn = a.turn
        step_id = model_step_id(index)
        stream_key = a.stream_key(step_id)
        journal: Any = None
        if a.announced != stream_key:
            # no checkpoint of this attempt announced this step (a resumed model step, or after
            # a compaction): recorded while the provider starts, not before it; a real model's
            # first token takes far longer than the write, which lands before this step commits
            journal = asyncio.ensure_future(
                self.store.journal(turn.turn_id, a.attempt_id, Phase.PROVIDER_STARTED, stream_key=stream_key)
            )
        # a turn at its limit makes this call its last: no tools, and told why (``limits``)
        last = a.limit_reached(a.transcript)
        system = a.policy.get("system", "")
        request = ModelRequest(
            system=f"{system}\n\n{a.limits.note(last)}".strip() if last else system,
            messages=a.request_messages(),
            tools=a.specs,
            stream_key=stream_key,
            tools_allowed=not last,
            batch_key=a.batch_key(step_id),
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
                    if self.signals.cancel_reason:
                        break
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
                if journal is not None:
                    await journal  # a lost lease (StaleAttemptError) surfaces here, before any commit
        except ModelParked as parked:
            return await self.park(step_id, parked)
        except ContextOverflowError as exc:
            if not a.compaction.enabled:
                return await self.owner.fail(str(exc), phase="model", step=step_id)
            overflow = str(exc)
        except ModelError as exc:
            if exc.retryable:
                raise RetryableTurnError(f"model: {exc}") from exc
            return await self.owner.fail(str(exc), phase="model", step=step_id)
        if self.signals.cancel_reason:
            return await self.owner.cancel((), discarded="".join(streamed)[: ev.DISCARDED_MAX])
        if overflow is not None or (
            reply is not None and reply.stop_reason == StopReason.CONTEXT_OVERFLOW and a.compaction.enabled
        ):
            return await self.compaction_steps.overflowed(step_id)
        if reply is None:
            raise RetryableTurnError("model: the stream ended without a reply")
        if reply.is_empty and reply.stop_reason in ABNORMAL_STOPS:
            return await self.owner.fail(
                f"the model stopped ({reply.stop_reason}) without a reply", phase="model", step=step_id
            )
        if last and not reply.text:
            return await self.owner.fail(
                f"the turn reached its limit of {limits.NAMES[last]} and its last model call gave no answer",
                phase="model",
                step=step_id,
            )
        message = Message(
            role=Role.ASSISTANT,
            text=reply.text,
            turn_id=turn.turn_id,
            tool_calls=() if last else reply.tool_calls,  # (a model that calls a tool it was not offered)
            blocks=reply.blocks,
            usage=dict(reply.usage),
            served_by=reply.served_by or None,
        )
        usage = a.usage_with(reply.usage, calls=1, served_by=reply.served_by)
        if watch is not None:
            watch.record(usage=reply.usage, stop_reason=str(reply.stop_reason), served_by=reply.served_by)
        # the turn's last reply: settle now, or first compact (a step of this turn)
        compact_next = not message.tool_calls and self.compaction_steps.due(message, request)

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
                units.settle_txn(tx, turn.turn_id, message.text, usage, limited=last)

        await self.owner.commit(work)
        return TurnStatus.COMPLETED if not message.tool_calls and not compact_next else None

    async def park(self, step_id: str, parked: ModelParked) -> TurnStatus:
        """One checkpoint: the turn parks on the model's answer to come (``pending[reason]``:
        the model's ``detail``). Resumed, the step runs again: the model yields the answer."""
        a = self.attempt
        turn = a.turn
        pending = {
            "reason": parked.reason,
            parked.reason: parked.detail,
            "step": step_id,
            "opening_text": turn.input.text,
            "policy": a.policy,
            "inbound": turn.input.to_json(),
        }
        usage = a.usage_with({})

        def work(tx: RecordingTx) -> None:
            tx.journal(Phase.PARKED, reason=parked.reason, step=step_id)
            # waiting: no person answers it (a cancel settles it at once; a new turn queues behind)
            tx.settle(TurnStatus.SUSPENDED, pending=pending, usage=usage, waiting=1)

        commit = await self.owner.commit(work)
        if commit.cancel_reason:  # a cancel that came meanwhile: a parked turn is cancelled at once
            outcome = await self.store.request_cancel(turn.turn_id, commit.cancel_reason)
            if outcome.events:
                await self.sink.publish(turn.session, outcome.events)
            return TurnStatus.CANCELLED
        return TurnStatus.SUSPENDED
