"""ChannelsEventSink: events to browsers through the Channels layer, after their commit.

The layer is at-most-once; the durable event log is the truth and the layer is the doorbell.

Layer messages (the consumer and the SSE view read them):

- ``{"type": "june.events", "events": [{"seq": …, "type": …, …}, …]}`` — committed events, in
  order, published after their commit;
- ``{"type": "june.delta", "event": {"type": "message.delta" | "reasoning.delta", "turn_id",
  "text", "offset", "base", ["snapshot": true]}}`` — live text, never stored.

Token deltas are coalesced: the first delta after a quiet spell goes at once (no added latency
for a model slower than the window); while deltas come faster than ``DELTA_WINDOW`` they are
joined and sent at most once per window, or at once past ``DELTA_MAX_CHARS``. Pending deltas are
always flushed before committed events, so a client sees text, then the event that commits it.

Each delta says where it belongs so a client that joins mid-stream (a reload) can place it:
``offset`` is the length of the stream's text before this piece, ``base`` the seq of the last
committed event this sink published in the session (a stream is the text between two commits,
so a client that already holds a later ``message.completed`` of the turn drops it as stale).
Every ``SNAPSHOT_EVERY`` seconds a flush carries the whole text so far (``offset`` 0,
``snapshot``), so a page reloaded mid-message shows the beginning again within a second.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from channels.layers import get_channel_layer

from agents_app.runtime.events import TERMINAL_TYPES, TurnEvent
from agents_app.runtime.seams import LoggedEvent, SessionRef

log = logging.getLogger(__name__)

DELTA_WINDOW = 0.02
#: a background sink's sender tasks (each sends its sessions' messages in order)
SENDERS = 8
DELTA_MAX_CHARS = 4096
SNAPSHOT_EVERY = 1.0


def group_name(session: SessionRef) -> str:
    """A Channels group name (letters, digits, hyphens, dots, underscores; < 100 chars)."""
    return _group_name(session.agent, session.key)


@functools.lru_cache(maxsize=4096)  # every delta of a live session asks again
def _group_name(agent: str, key: str) -> str:
    digest = hashlib.sha1(f"{agent}\0{key}".encode()).hexdigest()[:24]
    return f"june.session.{digest}"


@dataclass
class _Stream:
    """Live text of one session since its last published commit."""

    base: int | None = None
    texts: dict[tuple[str, str], str] = field(default_factory=dict)  # (turn_id, type) -> text so far
    sent: dict[tuple[str, str], int] = field(default_factory=dict)  # chars already sent
    last_flush: float = float("-inf")
    last_snapshot: float = 0.0
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ChannelsEventSink:
    """EventSink over the Channels layer. One instance per event loop (a q2 task's loop or
    daphne's): the coalescing timers live on the loop that calls it.

    ``background=True`` (a worker's sink) hands layer messages to sender tasks so a turn's next
    step does not wait on the layer's round trips: ``SENDERS`` of them, a session's messages
    always to the same one, in order (a worker's runner streams many sessions at once, and one
    sender would send them all one round trip after the other); ``close()`` drains them."""

    def __init__(self, layer: Any = None, *, background: bool = False) -> None:
        self.layer = layer if layer is not None else get_channel_layer()
        self._streams: dict[SessionRef, _Stream] = {}
        #: layer messages sent (deltas and event batches): the bench reads it
        self.sent_messages = 0
        self.background = background
        self._outboxes: dict[int, asyncio.Queue] = {}
        self._senders: list[asyncio.Task] = []

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        if self.layer is None or not events:
            return
        stream = self._streams.get(session)
        if stream is not None:
            async with stream.lock:
                await self._flush_locked(session, stream)
                # the commit ends the stream: the next model step streams from offset 0
                stream.texts.clear()
                stream.sent.clear()
                stream.base = max(e.seq for e in events)
            if any(e.event.type in TERMINAL_TYPES for e in events):
                self._drop(session)
        elif not any(e.event.type in TERMINAL_TYPES for e in events):
            self._streams[session] = _Stream(base=max(e.seq for e in events))
        await self._send(session, {"type": "june.events", "events": [e.frame() for e in events]})

    async def delta(self, session: SessionRef, event: TurnEvent) -> None:
        if self.layer is None:
            return
        stream = self._streams.setdefault(session, _Stream())
        key = (event.turn_id, event.type)
        stream.texts[key] = stream.texts.get(key, "") + getattr(event, "text", "")
        loop = asyncio.get_running_loop()
        now = loop.time()
        unsent = len(stream.texts[key]) - stream.sent.get(key, 0)
        if now - stream.last_flush >= DELTA_WINDOW or unsent >= DELTA_MAX_CHARS:
            async with stream.lock:
                await self._flush_locked(session, stream)
        elif stream.timer is None:
            stream.timer = loop.call_later(stream.last_flush + DELTA_WINDOW - now, self._on_timer, session, stream)

    async def close(self) -> None:
        """Send what is pending (a worker calls it before its loop ends)."""
        for session, stream in list(self._streams.items()):
            async with stream.lock:
                await self._flush_locked(session, stream)
            self._drop(session)
        for outbox in list(self._outboxes.values()):
            await outbox.join()
        for sender in self._senders:
            sender.cancel()
        self._senders, self._outboxes = [], {}

    # -- internals ------------------------------------------------------------------------------------

    def _on_timer(self, session: SessionRef, stream: _Stream) -> None:
        stream.timer = None

        async def flush() -> None:
            async with stream.lock:
                await self._flush_locked(session, stream)

        stream.task = asyncio.ensure_future(flush())

    async def _flush_locked(self, session: SessionRef, stream: _Stream) -> None:
        if stream.timer is not None:
            stream.timer.cancel()
            stream.timer = None
        now = asyncio.get_running_loop().time()
        snapshot = now - stream.last_snapshot >= SNAPSHOT_EVERY
        sent_any = False
        for (turn_id, type_), text in stream.texts.items():
            done = stream.sent.get((turn_id, type_), 0)
            if done >= len(text):
                continue
            piece, offset = (text, 0) if snapshot else (text[done:], done)
            event = {"type": type_, "turn_id": turn_id, "text": piece, "offset": offset, "base": stream.base}
            if snapshot:
                event["snapshot"] = True
            stream.sent[(turn_id, type_)] = len(text)
            await self._send(session, {"type": "june.delta", "event": event})
            sent_any = True
        if sent_any:
            stream.last_flush = now
            if snapshot:
                stream.last_snapshot = now

    def _drop(self, session: SessionRef) -> None:
        stream = self._streams.pop(session, None)
        if stream is not None and stream.timer is not None:
            stream.timer.cancel()

    async def _send(self, session: SessionRef, message: dict) -> None:
        if self.background:
            n = hash(session) % SENDERS
            outbox = self._outboxes.get(n)
            if outbox is None:
                outbox = self._outboxes[n] = asyncio.Queue()
                self._senders.append(asyncio.get_running_loop().create_task(self._drain(outbox)))
            outbox.put_nowait((session, message))
            return
        await self._send_now(session, message)

    async def _drain(self, outbox: asyncio.Queue) -> None:
        while True:
            session, message = await outbox.get()
            try:
                await self._send_now(session, message)
            finally:
                outbox.task_done()

    async def _send_now(self, session: SessionRef, message: dict) -> None:
        try:
            group = group_name(session)
            # ``group``: a consumer following a child session's group (subagents) tells them apart
            await self.layer.group_send(group, {**message, "group": group})
            self.sent_messages += 1
        except Exception:  # the log has it: a client re-reads after its last seq
            log.exception("publishing to %s failed", session)
