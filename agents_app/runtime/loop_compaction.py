"""The compaction steps of the turn loop (a mixin of ``TurnLoop``): when to compact, the
checkpointed ``compact:<n>`` step, the summarizing call. The pure rules are ``compaction.py``."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from . import events as ev
from . import subagents
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
from .loop_state import LoopState
from .messages import Message, Role, compact_step_id
from .model import (
    ContextOverflowError,
    ModelError,
    ModelReply,
    ModelRequest,
    StopReason,
)
from .position import turn_tail_start
from .seams import (
    Phase,
    TurnStatus,
)
from .units import RecordingTx

log = logging.getLogger(__name__)


class CompactionSteps(LoopState):
    """Methods of ``TurnLoop`` (they use its state: store, model, transcript, turn, …)."""


    def _tail(self) -> list[Message]:
        return self.transcript[turn_tail_start(self.transcript, self.turn.turn_id):]

    def _proactive_due(self, reply: Message | None = None, request: ModelRequest | None = None) -> bool:
        """After the turn's last reply (``reply``, about to commit, or the transcript's):
        did its step's input pass the threshold? A pure function of the transcript, so a
        replay decides what the first attempt decided."""
        tail = self._tail() + ([reply] if reply is not None else [])
        if request is not None:
            seen: Any = (*request.messages, reply)
        else:
            seen = self._request_messages()
        return proactive_due(self.compaction, self.window, tail,
                             lambda: view_tokens(self.policy.get("system", ""), seen))

    async def _overflowed(self, step_id: str) -> TurnStatus | None:
        """The model step overflowed the context window: compact and redo it, at most
        ``max_reactive`` times (counted off the transcript, so a replay counts the same)."""
        done = reactive_count(self._tail())
        if done >= self.compaction.max_reactive:
            return await self._fail(
                f"the model's context window is still exceeded after {done} compactions: what is kept "
                "verbatim (the current turn's messages, or a single message) does not fit it",
                phase="model", step=step_id,
            )
        return await self._compact("reactive", aggressive=done >= 1, failed_step=step_id)

    def _moved(self, boundary: int, summary_at: int) -> None:
        """The boundary moved: forget what the model no longer sees (the turn's own messages
        stay: the loop reads where it stands off them)."""
        opening = self.base + turn_tail_start(self.transcript, self.turn.turn_id)
        start = min(boundary, opening)
        if start > self.base:
            del self.transcript[: start - self.base]
            self.base = start
        self.boundary, self.summary_at = boundary, summary_at
        self._history = None

    async def _compact(self, reason: str, *, aggressive: bool = False, settle_text: str = "",
                       failed_step: str | None = None) -> TurnStatus | None:
        observer = getattr(self, "observer", None)
        if observer is None:
            return await self._compact_run(reason, aggressive=aggressive, settle_text=settle_text,
                                           failed_step=failed_step)
        with observer.compaction(self.turn, reason):
            return await self._compact_run(reason, aggressive=aggressive, settle_text=settle_text,
                                           failed_step=failed_step)

    async def _compact_run(self, reason: str, *, aggressive: bool = False, settle_text: str = "",
                           failed_step: str | None = None) -> TurnStatus | None:
        """One compaction step (``compact:<n>``): summarize the older part of the view with one
        call to the agent's model, then commit the summary and the new boundary together.
        Returns the turn's status if it ended the turn (a proactive one that had nothing to do
        or failed settles it; a reactive one that failed fails it), else None."""
        turn = self.turn
        system = self.policy.get("system", "")
        view = live_view(self.transcript, self.base, self.boundary, self.summary_at)
        k = select_boundary(view, keep_last=0 if aggressive else self.compaction.keep_last)
        if k is None and reason == "reactive" and not aggressive:
            k = select_boundary(view, keep_last=0)
        if k is None:
            if reason == "proactive":
                return await self._settle(settle_text)
            return await self._fail(
                "the model's context window is exceeded and nothing is left to summarize: the current "
                "turn's messages alone do not fit it", phase="model", step=failed_step,
            )
        at = self.base + len(self.transcript)
        step_id = compact_step_id(at)
        summarized = [m for _, m in view[:k]]
        kept = [m for _, m in view[k:]]
        cut = view[k][0]
        opening = self.base + turn_tail_start(self.transcript, turn.turn_id)
        last = next((m for m in reversed(summarized + kept) if m.role == Role.ASSISTANT), None)
        used = input_tokens(last.usage) if last is not None and reason == "proactive" else None
        before = used if used is not None else view_tokens(system, summarized + kept)
        started = f"{step_id}:started"
        if started not in self.state.steps:  # a replay does not announce it twice
            def begin(tx: RecordingTx) -> None:
                tx.step(started)
                tx.emit(ev.CompactionStarted(turn.turn_id, reason=reason, step=step_id, messages=len(summarized),
                                             tokens_before=before))
                tx.journal(Phase.PROVIDER_STARTED, step=step_id)

            await self._commit(begin)
        request = replace(summary_request(summarized, self.compaction, self.window),
                          stream_key=f"{turn.turn_id}:{step_id}:{self.attempt_id or '-'}")
        text, usage, error = await self._summarize(request)
        if error is not None:
            if reason == "reactive":
                return await self._fail(f"compaction failed: {error}", phase="compact", step=step_id)
            return await self._compaction_failed(step_id, error, settle_text)
        summary = Message(Role.SUMMARY, text=text, turn_id=turn.turn_id, usage=usage, boundary=cut)
        after = view_tokens(system, [summary, *kept])

        def work(tx: RecordingTx) -> None:
            index = tx.append(summary)
            tx.step(step_id, index, {"boundary": cut, "opening": opening, "reason": reason,
                                     "messages": len(summarized)})
            tx.boundary(cut, index)
            tx.emit(ev.CompactionCompleted(turn.turn_id, reason=reason, step=step_id, messages=len(summarized),
                                           tokens_before=before, tokens_after=after, boundary=cut, index=index,
                                           summary=text))
            tx.journal(Phase.BEFORE_PROVIDER)

        await self._commit(work)
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
        usage = self._usage_with({})

        def work(tx: RecordingTx) -> None:
            tx.emit(ev.CompactionFailed(self.turn.turn_id, reason="proactive", step=step_id, error=error))
            self._settle_txn(tx, text, usage)

        await self._commit(work)
        return TurnStatus.COMPLETED

    def _usage_with(self, extra: dict[str, int], *, calls: int = 0) -> dict[str, Any]:
        """What the turn spent: its own model calls' usage and their count (``model_calls``;
        ``extra`` and ``calls``: a reply not yet in the transcript), and its children's trees
        apart (``children``), so a sum over turns counts each call once, priced at its own
        agent's model."""
        total: dict[str, Any] = {}
        tail = self.transcript[turn_tail_start(self.transcript, self.turn.turn_id):]
        for m in tail:
            if m.role in (Role.ASSISTANT, Role.SUMMARY):  # a compaction's call costs too
                calls += m.role == Role.ASSISTANT and m.turn_id == self.turn.turn_id
                for k, v in m.usage.items():
                    total[k] = total.get(k, 0) + int(v)
        for k, v in extra.items():
            total[k] = total.get(k, 0) + int(v)
        if calls:
            total["model_calls"] = calls
        children = subagents.children_usage(self.state.spawned)
        if children:
            total["children"] = children
        return total

