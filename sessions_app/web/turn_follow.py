"""One turn's events for the front-end protocols (``uimessage_stream``, ``agui_stream``): from the
durable event log and live, until the turn ends or parks on a question.

Both protocols speak of one run (one assistant message) at a time, where June's own SSE speaks
of a session's log. A follower of the turn (``sse.SessionFollower``) already yields every
committed event exactly once in order, with live deltas between them; this adds where a run
stops: at ``turn.completed``, ``turn.failed`` or ``turn.cancelled``, or once every question
the turn is *still* parked on has been shown (a replay passes the questions answered since),
each marked with whether the caller may answer it (the answer path's rule, asked now)."""

from __future__ import annotations

import time
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Iterable, Protocol

from django.conf import settings
from django.utils import timezone

from agents_app.runtime import rules
from agents_app.runtime.seams import SessionRef, TurnStatus
from sessions_app import models as m
from sessions_app import selectors
from sessions_app.web.approvals import may_answer_here
from sessions_app.web.db import db
from sessions_app.web.sse import SessionFollower, comment

ENDS = frozenset({"turn.completed", "turn.failed", "turn.cancelled"})
#: a turn a front end may still be waiting on: the resume request replays it
UNSETTLED = frozenset({TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.SUSPENDED})


def replay_after(session: m.Session, turn: m.Turn) -> int:
    """The log position just before the turn's first event (its replay starts there)."""
    first = (
        m.Event.objects.filter(session=session, generation=turn.generation, turn_id=turn.pk)
        .order_by("seq")
        .values_list("seq", flat=True)[:1]
    )
    seq = next(iter(first), None)
    return seq - 1 if seq is not None else session.event_seq


def replies_before(*, agent: str, key: str, turn_id: str, after: int) -> int:
    """The turn's replies committed at or before ``after``: a resume run starts after them, and
    its first reply is the next message (numbered from 1 again, it took the id of the turn's
    first reply, and a client appended the answer after the tool to the text before it)."""
    return m.Event.objects.filter(
        session__agent=agent, session__key=key, turn_id=turn_id, seq__lte=after, type="message.completed"
    ).count()


def unsettled_turn(session: m.Session) -> m.Turn | None:
    """The live branch's last turn if it has not settled (queued, running or parked)."""
    turn = selectors.last_turn(session)
    return turn if turn is not None and turn.status in UNSETTLED else None


def _owed(turn_id: str, user: Any) -> dict[str, bool]:
    """The questions the turn is parked on now: input id → whether ``user`` may answer it."""
    turn = selectors.turn_with_session(turn_id)
    if turn is None or turn.status != TurnStatus.SUSPENDED:
        return {}
    return {str(r.get("id")): may_answer_here(turn, user, request=r) for r in rules.pending_requests(turn.pending)}


def queued_event(turn_id: str) -> dict[str, Any]:
    """``turn.queued``: what a stream that started its turn says first, as soon as the turn is
    durably queued (before any worker takes it). Not in the event log: the stream's own."""
    return {"type": "turn.queued", "turn_id": turn_id, "at": timezone.now().isoformat()}


async def turn_events(
    ref: SessionRef,
    *,
    turn_id: str,
    after: int,
    user: Any,
    follower: SessionFollower | None = None,
    queued: bool = False,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """The turn's events (JSON) from ``after``; None on an idle tick (send a keep-alive). Ends
    after its last event, after the questions it is parked on, or at JUNE_API_STREAM_SECONDS
    (the client then resumes). Closes the follower (pass one opened before the turn started,
    so not even its first delta is missed). ``queued``: the caller has just queued the turn,
    and the stream says so first (``queued_event``)."""
    follower = follower or await SessionFollower(ref, after=after, turn_id=turn_id).__aenter__()
    deadline = time.monotonic() + settings.JUNE_API_STREAM_SECONDS
    shown: set[str] = set()
    try:
        if queued:
            yield queued_event(turn_id)
        async for item in follower.items():
            if time.monotonic() >= deadline:
                return
            data = item.data
            if data is None:
                yield None
                continue
            if data.get("turn_id") != turn_id:  # a child's: its own run
                continue
            kind = data.get("type")
            if kind == "input.requested":
                owed = await db(_owed)(turn_id, user)
                input_id = str((data.get("request") or {}).get("id"))
                if input_id in owed:
                    shown.add(input_id)
                    yield {**data, "may_answer": owed[input_id]}
                    if set(owed) <= shown:
                        yield {"type": "turn.parked", "turn_id": turn_id, "owed": owed}
                        return
                    continue
            yield data
            if kind in ENDS:
                return
    finally:
        await follower.close()


class Fold(Protocol):
    """A protocol's mapping of one turn's events (``UIChunks``, ``AguiRun``): what opens the
    stream, what each event adds, what closes it."""

    def open(self) -> Iterable[Any]: ...

    def feed(self, event: dict[str, Any]) -> Iterable[Any]: ...

    def close(self) -> Iterable[Any]: ...


async def folded(
    events: AsyncGenerator[dict[str, Any] | None, None],
    fold: Fold,
    encode: Callable[[Any], bytes],
    end: Callable[[], Iterable[bytes]] = tuple,
) -> AsyncIterator[bytes]:
    """SSE bytes of ``events`` through ``fold``: what it opens with, what each event adds,
    keep-alive comments while idle (``None`` from ``events``), what it closes with, then ``end()``."""
    keepalive = settings.JUNE_SSE_KEEPALIVE_SECONDS
    last_write = time.monotonic()
    try:
        for item in fold.open():
            yield encode(item)
        async for event in events:
            now = time.monotonic()
            if event is None:
                if now - last_write >= keepalive:
                    last_write = now
                    yield comment("keep-alive")
                continue
            for item in fold.feed(event):
                last_write = now
                yield encode(item)
        for item in fold.close():
            yield encode(item)
        for tail in end():
            yield tail
    finally:  # a client gone mid-stream: its follower leaves the channel group now, not at GC
        await events.aclose()
