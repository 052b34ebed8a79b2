"""Fault-test agent: model ``faultmodel`` (registered at import, in whichever process loads the
agent — the test process or a qcluster child). Turn shape, whatever the opening text:

    user -> assistant [fault_write (sync), fault_ping (async)] -> tool -> tool -> assistant

The opening text ``"slow:<n>"`` streams n deltas (a long model step, for cancel tests);
``"die"`` kills its own worker process at every attempt (retry budget tests); ``"steps:<n>"``
calls the no-op sync tool ``fault_noop`` n times, one per model step, then answers (benchmarks);
``"approve-write"`` calls the sync ``fault_approved_write``, declared with ``approval=``;
``"charge"`` calls the async ``fault_charge`` (``on_interrupt="report"``) and then answers
``outcome: interrupted`` or ``outcome: charged`` from the tool result it reads.
A turn with attachments records, per model call, ``attach-ok`` when the request carries them on
exactly one message and every file reads back from storage, else ``attach-bad``.
Pause points (tests/fault/faultkit.py): ``model<k>:start``, ``model<k>:mid``, ``model<k>:end``
(k = the turn's assistant messages so far), ``write:before``, ``write:after``, ``ping:before``,
``ping:after``, ``charge:during``, ``approved:before``, ``approved:after``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import AsyncIterator

from agents_app import attachments
from agents_app.providers import register
from agents_app.runtime.messages import Role, ToolCall
from agents_app.runtime.model import ModelReply, StopReason, TextDelta
from tests.fault import faultkit

model = "faultmodel"


class FaultModel:
    async def stream(self, request) -> AsyncIterator[object]:
        turn_id = request.stream_key.split(":", 1)[0]
        mine = [m for m in request.messages if m.turn_id == turn_id]
        k = sum(1 for m in mine if m.role == Role.ASSISTANT)
        opening = next((m.text for m in mine if m.role in (Role.USER, Role.TRIGGER)), "")
        if "<task>\n" in opening:  # a child turn (subagents): the task is the opening
            opening = opening.split("<task>\n", 1)[1].rsplit("\n</task>", 1)[0]
        carrying = [m for m in request.messages if m.attachments]
        if carrying:
            whole = len(carrying) == 1 and all(attachments.read(a["id"]) for a in carrying[0].attachments)
            faultkit.record("attach-ok" if whole else "attach-bad", turn_id)
        await faultkit.apoint(f"model{k}:start")
        if opening == "die":
            faultkit.record("die", turn_id)
            os.kill(os.getpid(), signal.SIGKILL)
        calls: tuple[ToolCall, ...] = ()
        if opening.startswith("steps:"):
            more = k < int(opening.split(":", 1)[1])
            yield (
                ModelReply(
                    text="",
                    tool_calls=(ToolCall(id=f"n{k}", name="fault_noop", input={}),) if more else (),
                    stop_reason=StopReason.TOOL_USE if more else StopReason.END_TURN,
                    usage={"input_tokens": 1, "output_tokens": 1},
                )
                if more
                else ModelReply(
                    text="done", stop_reason=StopReason.END_TURN, usage={"input_tokens": 1, "output_tokens": 1}
                )
            )
            return
        if opening == "charge":  # one opted-in async tool (on_interrupt="report"), then its outcome
            if k == 0:
                yield ModelReply(
                    text="",
                    tool_calls=(ToolCall(id="c1", name="fault_charge", input={"item": "card"}),),
                    stop_reason=StopReason.TOOL_USE,
                    usage={"input_tokens": 1, "output_tokens": 1},
                )
            else:
                result = next((m.result for m in reversed(mine) if m.role == Role.TOOL), None)
                seen = "interrupted" if isinstance(result, dict) and result.get("interrupted") else "charged"
                yield ModelReply(
                    text=f"outcome: {seen}",
                    stop_reason=StopReason.END_TURN,
                    usage={"input_tokens": 1, "output_tokens": 1},
                )
            return
        if opening == "approve-write" and k == 0:  # a sync tool declared with approval=
            pieces = ["Asking ", "first."]
            calls = (ToolCall(id="a1", name="fault_approved_write", input={"item": "approved"}),)
        elif opening.startswith("slow:"):
            pieces = ["tick "] * int(opening.split(":", 1)[1])
        elif k == 0:
            pieces = ["Placing ", "the ", "order ", "and ", "pinging ", "the ", "warehouse."]
            calls = (
                ToolCall(id="w1", name="fault_write", input={"item": opening[:100]}),
                ToolCall(id="p1", name="fault_ping", input={"item": opening[:100]}),
            )
        else:
            pieces = ["Done: ", "one ", "order ", "placed ", "and ", "pinged."]
        pause = faultkit.delay()
        for i, piece in enumerate(pieces):
            if i == 2:
                await faultkit.apoint(f"model{k}:mid")
            if opening.startswith("slow:"):
                faultkit.record("delta", turn_id)
                await asyncio.sleep(0.25)
            elif pause:
                await asyncio.sleep(pause)
            yield TextDelta(piece)
        await faultkit.apoint(f"model{k}:end")
        yield ModelReply(
            text="".join(pieces),
            tool_calls=calls,
            stop_reason=StopReason.TOOL_USE if calls else StopReason.END_TURN,
            usage={"input_tokens": 10, "output_tokens": len(pieces)},
        )


register("faultmodel", lambda agent: FaultModel())
