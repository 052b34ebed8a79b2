"""The tool steps of the turn loop (``ToolSteps``, a collaborator of ``loop.TurnLoop``): run
each owed call (sync tools exactly-once in the checkpoint's transaction, async tools
at-least-once and interruptible by a cancel), the tool context, ``request_input`` and ``spawn``.
They read the attempt and checkpoint or end the turn through its owner (``loop_state``)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any, Awaitable, Callable

from . import approval, control, subagents
from . import events as ev
from .answers import default_answerers
from .control import Park, Signals, ToolInterrupted, interruptible
from .errors import ChildSessionRefused, FatalToolError, ToolDeclarationError
from .loop_state import Attempt, TurnOwner
from .messages import Message, Role, ToolCall, tool_step_id
from .observe import TurnObserver
from .recovery import call_was_in_flight
from .seams import EventSink, Phase, SessionStore, TurnStatus
from .tools import (
    INTERRUPTED_TOOL_RESULT,
    Tool,
    ToolContext,
    check_sync_result,
    format_tool_error,
    validate_input,
)
from .units import RecordingTx

log = logging.getLogger(__name__)


class _ToolRaised(Exception):
    """A sync tool raised: its unit is abandoned, so nothing the tool wrote commits, and the
    error result is recorded by a unit of its own."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _json_safe(value: Any) -> Any:
    json.dumps(value)  # raises TypeError for what a store cannot keep
    return value


class ToolSteps:
    """The tool steps of one attempt: the calls a model step asked for, run in order, each
    recorded by a checkpoint of the ``owner``'s. ``store``: what a tool's context hands it;
    ``signals``: a cancel interrupts an async tool and skips the calls after it;
    ``spawn_rules``: what its spawns may start; ``sink``: where a parent cancelled as it parks
    on its children says so (``subagents.park_on_children``)."""

    def __init__(
        self,
        attempt: Attempt,
        owner: TurnOwner,
        *,
        store: SessionStore,
        sink: EventSink,
        signals: Signals,
        spawn_rules: subagents.SpawnRules,
        observer: TurnObserver | None,
    ) -> None:
        self.attempt = attempt
        self.owner = owner
        self.store = store
        self.sink = sink
        self.signals = signals
        self.spawn_rules = spawn_rules
        self.observer = observer

    async def run(self, index: int, calls: tuple[ToolCall, ...], *, replay: bool) -> TurnStatus | None:
        """The calls of the model step at ``index`` still owed a result (``replay``: the first
        step a redelivered attempt runs, whose first call may have been cut off by a crash).
        None when all are recorded, else the status the turn ended in."""
        for n, call in enumerate(calls):
            if self.signals.cancel_reason:
                return await self.owner.cancel(calls[n:], index=index)
            later = calls[n + 1 :]
            status = await self._tool_step(
                index, call, later, interrupted=replay and n == 0 and self._was_in_flight(call)
            )
            if status is not None:
                return status
        return None

    def _was_in_flight(self, call: ToolCall) -> bool:
        return call_was_in_flight(self.attempt.turn, call.id, self.attempt.attempt_id)

    async def _tool_step(
        self, index: int, call: ToolCall, later: tuple[ToolCall, ...], *, interrupted: bool
    ) -> TurnStatus | None:
        if self.observer is None:
            return await self._tool_step_run(index, call, later, interrupted=interrupted)
        with self.observer.tool_call(self.attempt.turn, call.name, call.id):
            return await self._tool_step_run(index, call, later, interrupted=interrupted)

    async def _tool_step_run(
        self, index: int, call: ToolCall, later: tuple[ToolCall, ...], *, interrupted: bool
    ) -> TurnStatus | None:
        step_id = tool_step_id(index, call.id)
        tool = self.attempt.tools.get(call.name)
        ctx = self._context(call, tool)
        result: Any
        error: str | None = None
        gate = None
        if tool is not None and tool.approval is not None and validate_input(tool.spec, call.input) is None:
            gate = self._gate(tool, call)
            if gate.ask is not None:  # nothing runs before a person answers; the step's other
                # calls that need approval are asked now too, so all are shown and answered at once
                return await self.owner.park(call, step_id, gate.ask, also=self._asks_of(later))
            if gate.input is not None and gate.input is not call.input:  # edited: it runs as the person wrote it
                call = replace(call, input=gate.input)
        if tool is None:
            result, error = None, f"unknown tool: {call.name}"
        elif gate is not None and gate.rejected is not None:  # never runs; the model reads why
            result, error = None, gate.rejected
        elif (problem := validate_input(tool.spec, call.input)) is not None:
            result, error = None, problem
        elif interrupted and tool.is_async and tool.on_interrupt == "report":
            log.warning(
                "turn %s: async tool %s (call %s) was interrupted by a crash; not re-run "
                "(on_interrupt='report'): the model gets the interrupted marker",
                self.attempt.turn.turn_id,
                call.name,
                call.id,
            )
            result, error = INTERRUPTED_TOOL_RESULT, str(INTERRUPTED_TOOL_RESULT["error"])
        elif tool.is_async:
            try:
                result = _json_safe(await self._run_async(tool, call, ctx))
            except ToolInterrupted as stopped:
                # its result is the cancelled fill, as for the batch's unrun calls
                if stopped.abandoned:
                    log.warning(
                        "turn %s: async tool %s (call %s) ignored the cancel for %.1f s; abandoned, still running",
                        self.attempt.turn.turn_id,
                        call.name,
                        call.id,
                        control.CANCEL_GRACE,
                    )
                return await self.owner.cancel((call, *later), index=index)
            except Park as park:
                return await self.owner.park(call, step_id, park.request)
            except subagents.SpawnPark as park:
                try:
                    return await subagents.park_on_children(
                        self.attempt, self.owner, call, step_id, park.spawner.owed, store=self.store, sink=self.sink
                    )
                except ChildSessionRefused as exc:  # the unit rolled back: no child, no park
                    log.error("turn %s: spawn of call %s refused: %s", self.attempt.turn.turn_id, call.id, exc)
                    result, error = None, f"spawn refused: {exc}"
            except FatalToolError as exc:
                return await self.owner.fail(format_tool_error(exc), phase="tool", step=step_id)
            except Exception as exc:  # a tool that raises does not fail the turn
                result, error = None, format_tool_error(exc)
        else:
            return await self._sync_tool_step(index, call, later, tool, ctx, step_id)
        await self.owner.commit(lambda tx: self._record_txn(tx, index, call, later, result, error))
        return None

    def _gate(self, tool: Tool, call: ToolCall) -> approval.Gate:
        assert tool.approval is not None
        return approval.gate(
            tool.approval,
            call.name,
            tool.spec.input_schema,
            call.id,
            call.input,
            self.attempt.state.answers,
            lambda: default_answerers(self.attempt.turn),
        )

    def _asks_of(self, calls: tuple[ToolCall, ...]) -> list[tuple[ToolCall, dict[str, Any]]]:
        """The approvals owed by ``calls`` (a step's later calls), each with its call."""
        asks = []
        for call in calls:
            tool = self.attempt.tools.get(call.name)
            if tool is not None and tool.approval is not None and validate_input(tool.spec, call.input) is None:
                if (ask := self._gate(tool, call).ask) is not None:
                    asks.append((call, ask))
        return asks

    def _run_async(self, tool: Tool, call: ToolCall, ctx: ToolContext) -> Awaitable[Any]:
        """The tool's run, raced against the cancel unless it declared ``on_cancel="finish"``
        (then a cancel takes effect at the next boundary, after its result is recorded)."""
        run = tool.run(call.input, ctx)
        return run if tool.on_cancel == "finish" else interruptible(run, self.signals)

    async def _sync_tool_step(
        self, index: int, call: ToolCall, later: tuple[ToolCall, ...], tool: Tool, ctx: ToolContext, step_id: str
    ) -> TurnStatus | None:
        def work(tx: RecordingTx) -> None:
            try:
                result = _json_safe(check_sync_result(tool, tool.run(call.input, ctx)))
            except FatalToolError:
                raise
            except Exception as exc:  # abandon the unit: its rollback undoes the tool's writes
                raise _ToolRaised(format_tool_error(exc)) from exc
            self._record_txn(tx, index, call, later, result, None)

        try:
            await self.owner.commit(work, tool_code=True)
        except FatalToolError as exc:  # the whole unit rolled back; fail in a fresh one
            return await self.owner.fail(format_tool_error(exc), phase="tool", step=step_id)
        except _ToolRaised as raised:  # rolled back, tool writes included: record the error alone
            error = raised.error
            await self.owner.commit(lambda tx: self._record_txn(tx, index, call, later, None, error))
        return None

    def _record_txn(
        self, tx: RecordingTx, index: int, call: ToolCall, later: tuple[ToolCall, ...], result: Any, error: str | None
    ) -> None:
        turn_id = self.attempt.turn.turn_id
        stored = {"error": error} if error is not None and result is None else result
        at = tx.append(
            Message(
                Role.TOOL, turn_id=turn_id, call_id=call.id, name=call.name, result=stored, is_error=error is not None
            )
        )
        tx.step(tool_step_id(index, call.id), at)
        tx.emit(ev.ActionCompleted(turn_id, call_id=call.id, name=call.name, result=stored, error=error))
        if later:
            tx.journal(Phase.TOOL_REQUEST_RECORDED, tool_request=later[0].to_json(), index=index)
        else:
            self.attempt.provider_next(tx, at + 1)

    def _context(self, call: ToolCall, tool: Tool | None) -> ToolContext:
        turn = self.attempt.turn
        ctx = ToolContext(
            turn_id=turn.turn_id,
            call_id=call.id,
            session=turn.session.key,
            agent=turn.session.agent,
            store=self.store,
            idempotency_key=f"{turn.turn_id}:{call.id}",
            user=turn.input.user,
            source=turn.input.source,
            attachments=turn.input.attachments,
        )
        ctx.request_input = self._request_input_for(call, tool)
        if tool is not None and tool.is_async:
            spawner = subagents.Spawner(self.attempt, call, self.spawn_rules, self.observer)
            ctx.spawn, ctx.spawn_all = spawner.spawn, spawner.spawn_all
        else:
            ctx.spawn = ctx.spawn_all = subagents.refuse_for(call.name)
        return ctx

    def _request_input_for(self, call: ToolCall, tool: Tool | None) -> Callable[..., Any]:
        answers = self.attempt.state.answers
        turn = self.attempt.turn

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
