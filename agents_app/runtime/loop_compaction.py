"""The compaction steps of the turn loop (``CompactionSteps``, a collaborator of
``loop.TurnLoop``): when to compact, the checkpointed ``compact:<n>`` step, the summarizing
call. They read the attempt and checkpoint or end the turn through its owner (``loop_state``).
The pure rules are ``compaction.py``."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from . import events as ev
from . import units
from .compaction import (
    input_tokens,
    live_view,
    proactive_due,
    reactive_count,
    select_boundary,
    summary_request,
    view_tokens,
)
from .control import RetryableTurnError
from .loop_state import Attempt, TurnOwner
from .messages import Message, Role, compact_step_id
from .model import ContextOverflowError, ModelError, ModelReply, ModelRequest, StopReason
from .observe import TurnObserver
from .position import turn_tail_start
from .seams import Model, Phase, TurnStatus
from .units import RecordingTx

log = logging.getLogger(__name__)


class CompactionSteps:
    """The compaction steps of one attempt: each summarizes the older part of its view with one
    call to ``model`` (the agent's) and moves the boundary in a checkpoint of the ``owner``'s."""

    def __init__(self, attempt: Attempt, owner: TurnOwner, *, model: Model, observer: TurnObserver | None) -> None:
        self.attempt = attempt
        self.owner = owner
        self.model = model
        self.observer = observer

    def due(self, reply: Message | None = None, request: ModelRequest | None = None) -> bool:
        """After the turn's last reply (``reply``, about to commit, or the transcript's):
        did its step's input pass the threshold? A pure function of the transcript, so a
        replay decides what the first attempt decided."""
        a = self.attempt
        tail = a.tail() + ([reply] if reply is not None else [])
        if request is not None:
            seen: Any = (*request.messages, reply)
        else:
            seen = a.request_messages()
        return proactive_due(a.compaction, a.window, tail, lambda: view_tokens(a.policy.get("system", ""), seen))

    async def overflowed(self, step_id: str) -> TurnStatus | None:
        """The model step overflowed the context window: compact and redo it, at most
        ``max_reactive`` times (counted off the transcript, so a replay counts the same)."""
        done = reactive_count(self.attempt.tail())
        if done >= self.attempt.compaction.max_reactive:
            return await self.owner.fail(
                f"the model's context window is still exceeded after {done} compactions: what is kept "
                "verbatim (the current turn's messages, or a single message) does not fit it",
                phase="model",
                step=step_id,
            )
        return await self.compact("reactive", aggressive=done >= 1, failed_step=step_id)

    async def compact(
        self, reason: str, *, aggressive: bool = False, settle_text: str = "", failed_step: str | None = None
    ) -> TurnStatus | None:
        """One compaction step (``_compact_run``), watched by the observer if there is one."""
        if self.observer is None:
            return await self._compact_run(
                reason, aggressive=aggressive, settle_text=settle_text, failed_step=failed_step
            )
        with self.observer.compaction(self.attempt.turn, reason):
            return await self._compact_run(
                reason, aggressive=aggressive, settle_text=settle_text, failed_step=failed_step
            )

    async def _compact_run(
        self, reason: str, *, aggressive: bool = False, settle_text: str = "", failed_step: str | None = None
    ) -> TurnStatus | None:
        """One compaction step (``compact:<n>``): summarize the older part of the view with one
        call to the agent's model, then commit the summary and the new boundary together.
        Returns the turn's status if it ended the turn (a proactive one that had nothing to do
        or failed settles it; a reactive one that failed fails it), else None."""
        a = self.attempt
        turn = a.turn
        system = a.policy.get("system", "")
        view = live_view(a.transcript, a.base, a.boundary, a.summary_at)
        k = select_boundary(view, keep_last=0 if aggressive else a.compaction.keep_last)
        if k is None and reason == "reactive" and not aggressive:
            k = select_boundary(view, keep_last=0)
        if k is None:
            if reason == "proactive":
                return await self.owner.settle(settle_text)
            return await self.owner.fail(
                "the model's context window is exceeded and nothing is left to summarize: the current "
                "turn's messages alone do not fit it",
                phase="model",
                step=failed_step,
            )
        at = a.base + len(a.transcript)
        step_id = compact_step_id(at)
        summarized = [m for _, m in view[:k]]
        kept = [m for _, m in view[k:]]
        cut = view[k][0]
        opening = a.base + turn_tail_start(a.transcript, turn.turn_id)
        last = next((m for m in reversed(summarized + kept) if m.role == Role.ASSISTANT), None)
        used = input_tokens(last.usage) if last is not None and reason == "proactive" else None
        before = used if used is not None else view_tokens(system, summarized + kept)
        started = f"{step_id}:started"
        if started not in a.state.steps:  # a replay does not announce it twice

            def begin(tx: RecordingTx) -> None:
                tx.step(started)
                tx.emit(
                    ev.CompactionStarted(
                        turn.turn_id, reason=reason, step=step_id, messages=len(summarized), tokens_before=before
                    )
                )
                tx.journal(Phase.PROVIDER_STARTED, step=step_id)

            await self.owner.commit(begin)
        request = replace(summary_request(summarized, a.compaction, a.window), stream_key=a.stream_key(step_id))
        text, usage, error = await self._summarize(request)
        if error is not None:
            if reason == "reactive":
                return await self.owner.fail(f"compaction failed: {error}", phase="compact", step=step_id)
            return await self._compaction_failed(step_id, error, settle_text)
        summary = Message(Role.SUMMARY, text=text, turn_id=turn.turn_id, usage=usage, boundary=cut)
        after = view_tokens(system, [summary, *kept])

        def work(tx: RecordingTx) -> None:
            index = tx.append(summary)
            tx.step(
                step_id, index, {"boundary": cut, "opening": opening, "reason": reason, "messages": len(summarized)}
            )
            tx.boundary(cut, index)
            tx.emit(
                ev.CompactionCompleted(
                    turn.turn_id,
                    reason=reason,
                    step=step_id,
                    messages=len(summarized),
                    tokens_before=before,
                    tokens_after=after,
                    boundary=cut,
                    index=index,
                    summary=text,
                )
            )
            tx.journal(Phase.BEFORE_PROVIDER)

        await self.owner.commit(work)
        return None

    async def _summarize(self, request: ModelRequest) -> tuple[str, dict[str, int], str | None]:
        """The summarizing call: (summary, usage, error). Its deltas are not streamed: the
        summary is not the assistant's reply. An empty summary is an error, never a boundary."""
        reply: ModelReply | None = None
        stream = self.model.stream(request)
        try:
            async for chunk in stream:
                if isinstance(chunk, ModelReply):
                    reply = chunk
        except ContextOverflowError:
            return "", {}, "the summarizer's request is itself longer than the model's context window"
        except ModelError as exc:
            if exc.retryable:
                raise RetryableTurnError(f"compaction: {exc}") from exc
            return "", {}, str(exc)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if reply is None:
            raise RetryableTurnError("compaction: the stream ended without a reply")
        if reply.stop_reason == StopReason.CONTEXT_OVERFLOW:
            return "", {}, "the summarizer's request is itself longer than the model's context window"
        if not reply.text.strip():
            why = "with a tool call" if reply.tool_calls else f"({reply.stop_reason})"
            return "", dict(reply.usage), f"the summarizer answered {why} without a summary"
        return reply.text.strip(), dict(reply.usage), None

    async def _compaction_failed(self, step_id: str, error: str, text: str) -> TurnStatus:
        """A proactive compaction failed: the turn completes (its reply committed); the
        boundary stays where it was and the failure is logged."""
        turn_id = self.attempt.turn.turn_id
        usage = self.attempt.usage_with({})

        def work(tx: RecordingTx) -> None:
            tx.emit(ev.CompactionFailed(turn_id, reason="proactive", step=step_id, error=error))
            units.settle_txn(tx, turn_id, text, usage)

        await self.owner.commit(work)
        return TurnStatus.COMPLETED
