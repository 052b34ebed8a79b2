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

A worker's runner's sink on Redis sends nothing for a session nobody follows (``follows``: it
knows the groups that had a member when it subscribed and hears every follower that joins
later, so such a session costs no question to Redis); its text is still kept, so the first
flush after a follower arrives is a snapshot.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Sequence

from channels.layers import get_channel_layer

from agents_app.providers import is_long_lived
from agents_app.runtime.events import TERMINAL_TYPES, TurnEvent
from agents_app.runtime.seams import LoggedEvent, SessionRef
from sessions_app.outbox import follows

log = logging.getLogger(__name__)

DELTA_WINDOW = 0.02
#: a background sink's sender tasks (each sends its sessions' messages in order)
SENDERS = 8
DELTA_MAX_CHARS = 4096
SNAPSHOT_EVERY = 1.0
#: seconds a worker's sink remembers a session after its turn ended (its last batch, sent again
#: to a follower heard later, and whether anybody follows it)
FOLLOW_MEMORY = 60.0


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


@dataclass
class _Follow:
    """What a worker's sink knows of who follows one session (``follows``)."""

    session: SessionRef
    #: True: somebody did when asked (or since); False: nobody, and none heard since; None: ask
    followed: bool | None = None
    #: the last committed batch handed to the layer (sent again to a follower heard late)
    last: list[dict[str, Any]] | None = None
    skipped: bool = False  # a message was not sent since the last ask
    heard: bool = False  # a follower was heard while the ask was under way
    ended: bool = False  # its last batch ended its turn
    touched: float = 0.0  # its last message (the loop's clock)


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
        #: layer messages not sent: nobody followed their session (the bench reads it)
        self.skipped_messages = 0
        #: a worker's sink on Redis: who follows which session (``follows``), by group
        self._watching = background and follows.supported(self.layer)
        self._follows: dict[str, _Follow] = {}
        self._followers = follows.Followers(self.layer)  # the groups that may have a member
        self._listener: asyncio.Task | None = None
        self._listening = False  # subscribed: every follower that joins from now on is heard
        self._heard_before = False
        self._lost = 0  # connections the listener lost: an ask across a loss is not trusted
        self._pruned = 0.0

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
        stream = self._streams.get(session)
        if stream is None:  # not ``setdefault``: that would build a stream (and its lock) per delta
            stream = self._streams[session] = _Stream()
        key = (event.turn_id, event.type)
        stream.texts[key] = stream.texts.get(key, "") + getattr(event, "text", "")
        if self._unfollowed(session):
            return  # kept for a follower's snapshot; nothing to flush
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
        if self._listener is not None:
            self._listener.cancel()
            self._listener = None
        self._followers.close()
        self._follows.clear()

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
        if self._unfollowed(session):
            # nobody to send to: the text counts as sent, and a follower's first flush is a
            # snapshot (``_on_follow``)
            for key, text in stream.texts.items():
                stream.sent[key] = len(text)
            return
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
            if self._unfollowed(session):
                # what its sender would find too: nobody follows, and the listener would have
                # heard one join (its message is only remembered, not handed over)
                self._skip(self._follows[group_name(session)], message)
                return
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
            if self._watching and not await self._followed(session, group, message):
                self.skipped_messages += 1
                return
            # ``group``: a consumer following a child session's group (subagents) tells them apart
            await self.layer.group_send(group, {**message, "group": group})
            self.sent_messages += 1
        except Exception:  # the log has it: a client re-reads after its last seq
            log.exception("publishing to %s failed", session)

    # -- who follows (a worker's sink on Redis: ``follows``) ---------------------------------------

    def _unfollowed(self, session: SessionRef) -> bool:
        if not self._watching or not self._listening:
            return False
        group = _group_name(session.agent, session.key)  # (asked at every delta)
        known = self._follows.get(group)
        if known is None and self._followers.may_follow(group) is False:
            # nobody: decided here, no sender woken for it
            touched = asyncio.get_running_loop().time()
            known = self._follows[group] = _Follow(session, followed=False, touched=touched)
        return known is not None and known.followed is False

    async def _followed(self, session: SessionRef, group: str, message: dict) -> bool:
        """Whether to send ``message`` (in the session's sender, in order): the group is known
        empty (``follows.Followers``), or asked once; then trust what the listener hears."""
        if self._listener is None:
            loop = asyncio.get_running_loop()
            if not is_long_lived(loop):
                # a loop that runs one turn and ends (``asyncio.run``): a subscription per turn
                # would cost more than the sends it saves
                self._watching = False
                return True
            self._listener = loop.create_task(follows.watch(self.layer, self._on_follow, self._on_ready))
        known = self._follows.get(group)
        if known is None:
            known = self._follows[group] = _Follow(session)
        self._remember(known, message)
        if not self._listening:  # a follower joining now would not be heard: send
            return True
        if known.followed is None and self._followers.may_follow(group) is False:
            known.followed = False  # not in the snapshot, no join heard since: nobody
        if known.followed is None:
            known.heard, lost = False, self._lost
            try:
                found = await follows.has_members(self.layer, group)
            except Exception:
                log.exception("asking who follows %s failed; sending", session)
                return True
            if lost != self._lost or not self._listening:
                return True  # a follower may have joined unheard: ask again next time
            # a follower heard during the ask may have joined after Redis counted
            known.followed = found or known.heard
            if not known.followed:
                self._followers.forget(group)  # its follower left: its next join is heard
            known.skipped = False
        if known.followed:
            if known.ended:
                known.followed = None  # the turn ended: the next one asks again (followers leave)
            return True
        known.skipped = True
        return False

    def _remember(self, known: _Follow, message: dict) -> None:
        now = asyncio.get_running_loop().time()
        known.touched = now
        if message.get("type") == "june.events":
            known.last = message["events"]
            known.ended = any(e.get("type") in TERMINAL_TYPES for e in known.last)
        self._prune(now)

    def _skip(self, known: _Follow, message: dict) -> None:
        """A message not sent: nobody follows its session."""
        self._remember(known, message)
        known.skipped = True
        self.skipped_messages += 1

    def _on_follow(self, group: str) -> None:
        """A follower joined ``group`` somewhere: send to it from now on, and its session's last
        batch again (what it may have missed between its log read and now)."""
        self._followers.heard(group)
        known = self._follows.get(group)
        if known is None or known.followed:
            return  # not this sink's yet (remembered above), or sent to already
        if known.followed is None:
            known.heard = True  # an ask may be under way: its answer may predate the join
            return
        known.followed = True
        stream = self._streams.get(known.session)
        if stream is not None:
            stream.last_snapshot = float("-inf")  # the next flush carries the whole text
        if known.skipped and known.last is not None:
            known.skipped = False
            # ``again``: a doorbell (the consumer reads the log); the batch may be of an earlier
            # session of this name, deleted and made anew while this sink remembered it
            again = {"type": "june.events", "events": known.last, "again": True}
            asyncio.ensure_future(self._send(known.session, again))

    def _on_ready(self, ready: bool) -> None:
        if not ready:
            self._lost += self._listening
            self._listening = False
            self._followers.lost()
            return
        self._listening = True
        self._followers.subscribed()  # after the subscription: a join in between is in both
        if self._heard_before:
            # back after a lost connection: a follower may have joined unheard
            for group, known in list(self._follows.items()):
                if known.followed is False:
                    known.followed = None
                    asyncio.ensure_future(self._ask_again(group, known))
        self._heard_before = True

    async def _ask_again(self, group: str, known: _Follow) -> None:
        known.heard, lost = False, self._lost
        try:
            found = await follows.has_members(self.layer, group)
        except Exception:
            log.exception("asking who follows %s again failed", known.session)
            return  # left to ask at its next message
        if known.followed is None and lost == self._lost and self._listening:
            known.followed = False
            if found or known.heard:
                self._on_follow(group)

    def _prune(self, now: float) -> None:
        """Forget the sessions quiet for ``FOLLOW_MEMORY`` (their next message asks again; what
        was not sent to them is older than any follower's log read since)."""
        if now - self._pruned < 1.0:
            return
        self._pruned = now
        for group in [g for g, k in self._follows.items() if now - k.touched > FOLLOW_MEMORY]:
            del self._follows[group]
