"""What the model is sent: the session's live view (the summary, then the messages from the
boundary on), earlier turns repaired once (``close_dangling_calls``) and kept per (session,
generation, boundary), so a step costs the same at 10 or 10,000 messages of live history."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, cast

from .messages import Message, Role
from .position import close_dangling_calls, turn_tail_start

#: the earlier turns of a session's live view as the model sees them (summaries left out,
#: dangling calls closed), by (session, generation, boundary): (the messages they were made
#: from, the view). The next turn of the session repairs only the messages added since: a turn
#: costs the same at 10 or 2,000 messages of history. Bounded: the most recently used views.
_EARLIER: OrderedDict[tuple[Any, ...], tuple[list[Message], tuple[Message, ...]]] = OrderedDict()
_EARLIER_LOCK = threading.Lock()
MAX_EARLIER = 64


def _earlier(view: tuple[Any, ...], messages: list[Message]) -> tuple[Message, ...]:
    """``close_dangling_calls`` of ``messages`` (the earlier turns, from the boundary), summaries
    left out. Reuses what was made for the same ``view`` from a prefix of ``messages``: equal
    messages (compared by identity first, so a store that hands out the objects it holds costs
    a pointer per message), cut where a turn ends (the next message is no tool result: a batch
    of calls and its results never straddle the cut)."""
    summary = Role.SUMMARY  # a local: an enum member's lookup costs more than the comparison
    with _EARLIER_LOCK:
        held = _EARLIER.get(view)
    n, repaired = 0, cast(tuple[Message, ...], ())
    if held is not None and len(held[0]) <= len(messages) and messages[: len(held[0])] == held[0]:
        n, repaired = len(held[0]), held[1]
    added = [m for m in messages[n:] if m.role != summary]
    if n and added and added[0].role == Role.TOOL:  # not cut where a turn ends: all again
        n, repaired, added = 0, cast(tuple[Message, ...], ()), [m for m in messages if m.role != summary]
    if added or not n:
        repaired = repaired + tuple(close_dangling_calls(added))
    with _EARLIER_LOCK:
        _EARLIER[view] = (messages, repaired)
        _EARLIER.move_to_end(view)
        while len(_EARLIER) > MAX_EARLIER:
            _EARLIER.popitem(last=False)
    return repaired


def request_messages(
    transcript: list[Message],
    turn: Any,
    *,
    base: int,
    boundary: int,
    summary_at: int | None,
    history: tuple[Any, tuple[Message, ...]] | None,
) -> tuple[tuple[Any, tuple[Message, ...]], tuple[Message, ...]]:
    """(the earlier turns' part, keyed, for the attempt's next step; the messages). Earlier
    turns are repaired once per attempt (not per step), and only past what an earlier attempt
    of the session repaired (``_earlier``)."""
    start = turn_tail_start(transcript, turn.turn_id)
    b = boundary - base
    key = (base, boundary, start)
    summary = Role.SUMMARY  # a local: an enum member's lookup costs more than the comparison
    if history is None or history[0] != key:
        history = (key, _earlier((turn.session, turn.generation, boundary), transcript[b:start]))
    head = (transcript[summary_at - base],) if summary_at is not None else ()
    tail = [m for m in transcript[max(b, start) :] if m.role != summary]
    return history, head + history[1] + tuple(close_dangling_calls(tail))
