"""The turn loop: ask the model, run the tools it asked for, ask again — one checkpoint per
step, replayable from whatever the store says.

``TurnLoop.run`` drives one attempt of one turn. It is safe to call again for the same turn
at any time (a redelivery): the opening is not appended twice, finished steps are skipped, a
cached model step emits nothing, and the calls still owed a result are read off the
transcript.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any, Awaitable, Callable

from . import events as ev
from . import subagents
from .agent import Agent
from .answers import default_answerers
from .compaction import (
    input_tokens,
    live_view,
    proactive_due,
    reactive_count,
    select_boundary,
    summary_request,
    view_tokens,
)
from .control import Park, RetryableTurnError, Signals
from .errors import FatalToolError, StaleAttemptError, ToolDeclarationError
from .messages import Message, Role, ToolCall, compact_step_id, model_step_id, tool_step_id
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
from .position import NextKind, close_dangling_calls, next_action, turn_tail_start
from .recovery import call_was_in_flight
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
from .tools import (
    CANCELLED_RESULT,
    INTERRUPTED_TOOL_RESULT,
    Tool,
    ToolContext,
    check_sync_result,
    format_tool_error,
    validate_input,
)

log = logging.getLogger(__name__)


class _RecordingTx:
    """Wraps the store's Tx to mirror appended messages into the loop's transcript."""

    __slots__ = ("tx", "base", "appended", "steps", "moved")

    def __init__(self, tx: Tx, base: int) -> None:
        self.tx = tx
        self.base = base
        self.appended: list[Message] = []
        self.steps: list[str] = []
        self.moved: tuple[int, int] | None = None

    def append(self, message: Message) -> int:
        index = self.base + len(self.appended)
        self.tx.append(message, index)
        self.appended.append(message)
        return index

    def step(self, step_id: str, index: int | None = None, data: Any = None) -> None:
        self.steps.append(step_id)
        self.tx.step(step_id, index, data)

    def boundary(self, index: int, summary_index: int) -> None:
        self.moved = (index, summary_index)
        self.tx.boundary(index, summary_index)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tx, name)


class _ToolRaised(Exception):
    """A sync tool raised: its unit is abandoned, so nothing the tool wrote commits, and the
    error result is recorded by a unit of its own."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _no_agent(name: str) -> Agent:
    raise LookupError(name)


def _json_safe(value: Any) -> Any:
    json.dumps(value)  # raises TypeError for what a store cannot keep
    return value


class TurnLoop:
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
    ) -> None:
        self.agent = agent
        self.store = store
        self.sink = sink
        self.model = model
        self.signals = signals or Signals()
        #: subagents: the agents a tool may spawn, who dispatches the turns a unit made runnable
        self.agent_for = agent_for or (lambda name: agent if name == agent.name else _no_agent(name))
        self.on_runnable = on_runnable
        self.max_depth, self.max_fanout = max_depth, max_fanout
        self._history: tuple[tuple[int, ...], tuple[Message, ...]] | None = None

    # -- plumbing -----------------------------------------------------------------------------

    async def _commit(self, work: Callable[[Any], None], *, tool_code: bool = False, dispatch: bool = True) -> Commit:
        """One checkpoint. ``tool_code``: ``work`` runs a sync tool, whose own writes (through
        the store's handle) commit with it (``SessionStore.atomic``); otherwise ``work`` only
        records through ``tx`` (``SessionStore.commit``)."""
        recorder_box: list[_RecordingTx] = []

        def unit(tx: Tx) -> None:
            rec = _RecordingTx(tx, self.base + len(self.transcript))
            recorder_box.append(rec)
            work(rec)

        run = self.store.atomic if tool_code else self.store.commit
        commit = await run(self.turn.turn_id, self.attempt_id, unit)
        rec = recorder_box[-1]
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

    async def run(self, turn_id: str, attempt_id: str | None) -> TurnStatus:
        """Drive the turn from where the store says it is; return the status it ended in.

        Raises RetryableTurnError when a redelivery may succeed; returns quietly (with the
        status it believes) when another attempt took the turn over (StaleAttemptError).
        """
        self.attempt_id = attempt_id
        self.state: TurnState = await self.store.load(turn_id)
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
        self.tools = self.agent.tools_for(self.policy)
        try:
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
        turn = self.turn
        role = Role.TRIGGER if turn.input.kind == "proactive" else Role.USER
        opening = Message(role=role, text=turn.input.text, turn_id=turn.turn_id, by=turn.input.by)

        def work(tx: Tx) -> None:
            tx.append(opening)
            tx.emit(ev.TurnStarted(turn.turn_id, trigger=turn.input.kind, text=turn.input.text))
            tx.journal(Phase.BEFORE_PROVIDER)
            tx.settle(TurnStatus.RUNNING)

        await self._commit(work)

    # -- model step ---------------------------------------------------------------------------

    async def _model_step(self, index: int) -> TurnStatus | None:
        turn = self.turn
        step_id = model_step_id(index)
        stream_key = f"{turn.turn_id}:{step_id}:{self.attempt_id or '-'}"
        # recorded while the provider starts (not before it): a real model's first token takes far
        # longer than the write, and the write lands before anything this step commits
        journal = asyncio.ensure_future(
            self.store.journal(turn.turn_id, self.attempt_id, Phase.PROVIDER_STARTED, stream_key=stream_key)
        )
        request = ModelRequest(
            system=self.policy.get("system", ""),
            messages=self._request_messages(),
            tools=self.agent.specs_for(self.policy),
            stream_key=stream_key,
        )
        reply: ModelReply | None = None
        overflow: str | None = None
        stream = self.model.stream(request)
        try:
            try:
                async for chunk in stream:
                    if isinstance(chunk, TextDelta):
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
            return await self._cancel(())
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
        message = Message(
            role=Role.ASSISTANT,
            text=reply.text,
            turn_id=turn.turn_id,
            tool_calls=reply.tool_calls,
            blocks=reply.blocks,
            usage=dict(reply.usage),
        )
        usage = self._usage_with(reply.usage)
        # the turn's last reply: settle now, or first compact (a step of this turn)
        compact_next = not message.tool_calls and self._proactive_due(message, request)

        def work(tx: Tx) -> None:
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
                self._settle_txn(tx, message.text, usage)

        await self._commit(work)
        return TurnStatus.COMPLETED if not message.tool_calls and not compact_next else None

    def _request_messages(self) -> tuple[Message, ...]:
        """The live view as the model sees it: the summary, then the messages from the boundary
        on. Earlier turns are repaired once per attempt (not per step), so a step costs the
        same at 10 or 10,000 messages of live history."""
        start = turn_tail_start(self.transcript, self.turn.turn_id)
        b = self.boundary - self.base
        key = (self.base, self.boundary, start)
        if self._history is None or self._history[0] != key:
            earlier = [m for m in self.transcript[b:start] if m.role != Role.SUMMARY]
            self._history = (key, tuple(close_dangling_calls(earlier)))
        head = (self.transcript[self.summary_at - self.base],) if self.summary_at is not None else ()
        tail = [m for m in self.transcript[max(b, start):] if m.role != Role.SUMMARY]
        return head + self._history[1] + tuple(close_dangling_calls(tail))

    # -- compaction ---------------------------------------------------------------------------

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
            def begin(tx: Tx) -> None:
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

        def work(tx: Tx) -> None:
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

        def work(tx: Tx) -> None:
            tx.emit(ev.CompactionFailed(self.turn.turn_id, reason="proactive", step=step_id, error=error))
            self._settle_txn(tx, text, usage)

        await self._commit(work)
        return TurnStatus.COMPLETED

    def _usage_with(self, extra: dict[str, int]) -> dict[str, int]:
        total: dict[str, int] = {}
        tail = self.transcript[turn_tail_start(self.transcript, self.turn.turn_id):]
        for m in tail:
            if m.role in (Role.ASSISTANT, Role.SUMMARY):  # a compaction's call costs too
                for k, v in m.usage.items():
                    total[k] = total.get(k, 0) + int(v)
        for k, v in extra.items():
            total[k] = total.get(k, 0) + int(v)
        for k, v in subagents.children_usage(self.state.spawned).items():
            total[k] = total.get(k, 0) + v
        return total

    # -- tool steps ---------------------------------------------------------------------------

    async def _tool_steps(self, index: int, calls: tuple[ToolCall, ...], *, replay: bool) -> TurnStatus | None:
        for n, call in enumerate(calls):
            if self.cancel_reason:
                return await self._cancel(calls[n:], index=index)
            later = calls[n + 1 :]
            status = await self._tool_step(index, call, later, interrupted=replay and n == 0 and self._was_in_flight(call))
            if status is not None:
                return status
        return None

    def _was_in_flight(self, call: ToolCall) -> bool:
        return call_was_in_flight(self.turn, call.id, self.attempt_id)

    async def _tool_step(
        self, index: int, call: ToolCall, later: tuple[ToolCall, ...], *, interrupted: bool
    ) -> TurnStatus | None:
        step_id = tool_step_id(index, call.id)
        tool = self.tools.get(call.name)
        ctx = self._context(call, tool)
        result: Any
        error: str | None = None
        if tool is None:
            result, error = None, f"unknown tool: {call.name}"
        elif (problem := validate_input(tool.spec, call.input)) is not None:
            result, error = None, problem
        elif interrupted and tool.is_async and tool.on_interrupt == "report":
            log.warning("turn %s: async tool %s (call %s) was interrupted by a crash; not re-run "
                        "(on_interrupt='report'): the model gets the interrupted marker",
                        self.turn.turn_id, call.name, call.id)
            result, error = INTERRUPTED_TOOL_RESULT, INTERRUPTED_TOOL_RESULT["error"]
        elif tool.is_async:
            try:
                result = _json_safe(await tool.run(call.input, ctx))
            except Park as park:
                return await self._park(call, step_id, park.request)
            except subagents.SpawnPark as park:
                return await subagents.park_on_children(self, call, step_id, park.spawner.owed)
            except FatalToolError as exc:
                return await self._fail(format_tool_error(exc), phase="tool", step=step_id)
            except Exception as exc:  # a tool that raises does not fail the turn
                result, error = None, format_tool_error(exc)
        else:
            return await self._sync_tool_step(index, call, later, tool, ctx, step_id)
        await self._commit(lambda tx: self._record_txn(tx, index, call, later, result, error))
        return None

    async def _sync_tool_step(
        self, index: int, call: ToolCall, later: tuple[ToolCall, ...], tool: Tool, ctx: ToolContext, step_id: str
    ) -> TurnStatus | None:
        def work(tx: Tx) -> None:
            try:
                result = _json_safe(check_sync_result(tool, tool.run(call.input, ctx)))
            except FatalToolError:
                raise
            except Exception as exc:  # abandon the unit: its rollback undoes the tool's writes
                raise _ToolRaised(format_tool_error(exc)) from exc
            self._record_txn(tx, index, call, later, result, None)

        try:
            await self._commit(work, tool_code=True)
        except FatalToolError as exc:  # the whole unit rolled back; fail in a fresh one
            return await self._fail(format_tool_error(exc), phase="tool", step=step_id)
        except _ToolRaised as raised:  # rolled back, tool writes included: record the error alone
            error = raised.error
            await self._commit(lambda tx: self._record_txn(tx, index, call, later, None, error))
        return None

    def _record_txn(
        self, tx: Tx, index: int, call: ToolCall, later: tuple[ToolCall, ...], result: Any, error: str | None
    ) -> None:
        turn_id = self.turn.turn_id
        stored = {"error": error} if error is not None and result is None else result
        at = tx.append(
            Message(Role.TOOL, turn_id=turn_id, call_id=call.id, name=call.name, result=stored, is_error=error is not None)
        )
        tx.step(tool_step_id(index, call.id), at)
        tx.emit(ev.ActionCompleted(turn_id, call_id=call.id, name=call.name, result=stored, error=error))
        if later:
            tx.journal(Phase.TOOL_REQUEST_RECORDED, tool_request=later[0].to_json(), index=index)
        else:
            tx.journal(Phase.BEFORE_PROVIDER)

    def _context(self, call: ToolCall, tool: Tool | None) -> ToolContext:
        turn = self.turn
        ctx = ToolContext(
            turn_id=turn.turn_id,
            call_id=call.id,
            session=turn.session.key,
            agent=turn.session.agent,
            store=self.store,
            idempotency_key=f"{turn.turn_id}:{call.id}",
            user=turn.input.user,
            source=turn.input.source,
        )
        ctx.request_input = self._request_input_for(call, tool)
        if tool is not None and tool.is_async:
            spawner = subagents.Spawner(self, call)
            ctx.spawn, ctx.spawn_all = spawner.spawn, spawner.spawn_all
        else:
            ctx.spawn = ctx.spawn_all = subagents.refuse_for(call.name)
        return ctx

    def _request_input_for(self, call: ToolCall, tool: Tool | None) -> Callable[..., Any]:
        answers = self.state.answers
        turn = self.turn

        if tool is None or not tool.is_async:
            # a plain function, so the refusal is raised at the call: an async one would hand a
            # sync tool an un-awaited (truthy) coroutine and it would carry on as if answered
            def refuse(**_: Any) -> Any:
                raise ToolDeclarationError(
                    f"tool {call.name!r}: request_input is only for async tools; a sync tool runs "
                    "inside an open transaction that cannot be left open"
                )

            return refuse

        async def request_input(
            *, id: str, prompt: str, schema: dict[str, Any] | None = None, answerers: dict[str, Any] | None = None
        ) -> Any:
            if id in answers:
                return answers[id]
            return_answerers = answerers if answerers is not None else default_answerers(turn)
            raise Park({"id": id, "prompt": prompt, "schema": schema, "answerers": return_answerers})

        return request_input

    # -- endings ------------------------------------------------------------------------------

    async def _park(self, call: ToolCall, step_id: str, request: dict[str, Any]) -> TurnStatus:
        turn = self.turn
        pending = {
            "request": request,
            "call_id": call.id,
            "call": call.to_json(),
            "step": step_id,
            "opening_text": turn.input.text,
            "policy": self.policy,
            "inbound": turn.input.to_json(),
        }

        def work(tx: Tx) -> None:
            tx.emit(ev.InputRequested(turn.turn_id, request=request, call_id=call.id))
            tx.journal(Phase.PARKED, call_id=call.id, input_id=request["id"])
            tx.settle(TurnStatus.SUSPENDED, pending=pending)

        await self._commit(work)
        return TurnStatus.SUSPENDED

    def _settle_txn(self, tx: Tx, text: str, usage: dict[str, int]) -> None:
        tx.emit(ev.TurnCompleted(self.turn.turn_id, text=text))
        tx.journal(Phase.COMMITTED)
        tx.settle(TurnStatus.COMPLETED, text=text, usage=usage)

    async def _settle(self, text: str) -> TurnStatus:
        usage = self._usage_with({})
        await self._commit(lambda tx: self._settle_txn(tx, text, usage))
        return TurnStatus.COMPLETED

    async def _fail(self, error: str, *, phase: str | None = None, step: str | None = None) -> TurnStatus:
        turn_id = self.turn.turn_id

        def work(tx: Tx) -> None:
            tx.emit(ev.TurnFailed(turn_id, error=error, phase=phase, step=step))
            tx.journal(Phase.COMMITTED)
            tx.settle(TurnStatus.FAILED, error={"message": error, "phase": phase, "step": step})

        await self._commit(work)
        return TurnStatus.FAILED

    async def _cancel(self, owed: tuple[ToolCall, ...], *, index: int = -1) -> TurnStatus:
        turn = self.turn
        reason = self.cancel_reason or "requested"

        def work(tx: Tx) -> None:
            # unrun calls get a synthetic result so the transcript stays valid for the model
            for call in owed:
                at = tx.append(
                    Message(Role.TOOL, turn_id=turn.turn_id, call_id=call.id, name=call.name, result=CANCELLED_RESULT)
                )
                tx.step(tool_step_id(index, call.id), at)
            tx.emit(ev.TurnCancelled(turn.turn_id, reason=reason))
            tx.journal(Phase.COMMITTED)
            tx.settle(TurnStatus.CANCELLED, error={"reason": reason})

        await self._commit(work)
        return TurnStatus.CANCELLED
