"""Where a turn stands, read straight off the transcript (a pure function).

Calls still owed a result are read off the transcript, not the step cache, so a crash in the
middle of a batch of tool calls resumes the remaining calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Iterator, Sequence

from .frozen import fast_init
from .messages import Message, Role, ToolCall


class NextKind(StrEnum):
    OPEN = "open"  # the opening message is not committed yet
    MODEL = "model"  # ask the model (its reply lands at ``index``)
    TOOLS = "tools"  # run ``calls`` made by the assistant message at ``index``
    SETTLE = "settle"  # the last reply has no calls: the turn is done


@fast_init
@dataclass(frozen=True, slots=True)
class Next:
    kind: NextKind
    index: int = -1
    calls: tuple[ToolCall, ...] = ()


def turn_tail_start(transcript: Sequence[Message], turn_id: str) -> int:
    """Index of the first message of ``turn_id``'s tail (turns of a session run in order, so
    a turn's messages are the end of the transcript while it runs); len() when none."""
    i = len(transcript)
    while i > 0 and transcript[i - 1].turn_id == turn_id:
        i -= 1
    return i


def next_action(transcript: Sequence[Message], turn_id: str) -> Next:
    start = turn_tail_start(transcript, turn_id)
    if start == len(transcript) or transcript[start].role not in (Role.USER, Role.TRIGGER):
        return Next(NextKind.OPEN)
    opening = start
    last_assistant = -1
    for i in range(len(transcript) - 1, opening, -1):
        if transcript[i].role == Role.ASSISTANT:
            last_assistant = i
            break
    if last_assistant < 0:
        return Next(NextKind.MODEL, index=len(transcript))
    reply = transcript[last_assistant]
    if not reply.tool_calls:
        return Next(NextKind.SETTLE, index=last_assistant)
    answered = {m.call_id for m in transcript[last_assistant + 1 :] if m.role == Role.TOOL}
    owed = tuple(c for c in reply.tool_calls if c.id not in answered)
    if owed:
        return Next(NextKind.TOOLS, index=last_assistant, calls=owed)
    return Next(NextKind.MODEL, index=len(transcript))


#: what the model reads for a call of an earlier turn that ended (failed) before it ran
NOT_RUN_RESULT = {"error": "not run: the turn ended before this call had a result"}


def _dangling_batches(transcript: Sequence[Message]) -> Iterator[bool]:
    """For each assistant message with calls: whether the messages right after it are not
    plainly the results of all its calls (then ``close_dangling_calls`` looks closer). One pass
    over the messages with calls, in the loop itself: it runs over a session's whole history."""
    tool, assistant = Role.TOOL, Role.ASSISTANT  # locals: an enum member's lookup is not free
    for i in [i for i, m in enumerate(transcript) if m.tool_calls and m.role == assistant]:
        calls = transcript[i].tool_calls
        batch = transcript[i + 1 : i + 1 + len(calls)]
        if len(calls) == 1:
            yield not batch or batch[0].role != tool or batch[0].call_id != calls[0].id
        else:
            yield (
                len(batch) != len(calls)
                or any(m.role != tool for m in batch)
                or not {m.call_id for m in batch} >= {c.id for c in calls}
            )


def close_dangling_calls(transcript: Sequence[Message]) -> list[Message]:
    """The transcript as sent to a model: a call with no tool message (its turn failed before
    running it) gets a synthetic error result right after its batch, so the request stays valid.
    Pure; the stored transcript is not changed. A transcript with nothing to close is returned
    as a copy after one pass that looks only at the messages with calls (the common case, run
    once per attempt over the whole history)."""
    if not any(_dangling_batches(transcript)):
        return list(transcript)
    out: list[Message] = []
    i = 0
    while i < len(transcript):
        message = transcript[i]
        out.append(message)
        i += 1
        if message.role != Role.ASSISTANT or not message.tool_calls:
            continue
        answered = set()
        while i < len(transcript) and transcript[i].role == Role.TOOL:
            answered.add(transcript[i].call_id)
            out.append(transcript[i])
            i += 1
        for call in message.tool_calls:
            if call.id not in answered:
                out.append(
                    Message(
                        Role.TOOL,
                        turn_id=message.turn_id,
                        call_id=call.id,
                        name=call.name,
                        result=NOT_RUN_RESULT,
                        is_error=True,
                    )
                )
    return out
