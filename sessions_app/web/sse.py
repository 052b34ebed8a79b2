"""Server-sent events for the HTTP API: frame formatting and following a session's event log.

The durable event log is the truth and the Channels layer is the doorbell (it is at most
once, and the in-memory layer cannot carry events from q2 workers at all). A follower
therefore reads the log after its last sequence number whenever the doorbell rings *and* on a
short poll, so a lost layer message costs latency, never an event. Token deltas exist only on
the layer: they are passed through live, without an ``id:`` line, and are best effort.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

from channels.layers import get_channel_layer
from django.conf import settings

from agents_app.runtime.events import TERMINAL_TYPES
from agents_app.runtime.seams import SessionRef
from sessions_app import wiring
from sessions_app.outbox import follows
from sessions_app.outbox.sink import group_name
from sessions_app.web.child_streams import ChildLogs
from sessions_app.web.db import db

log = logging.getLogger(__name__)

#: a reconnecting EventSource waits this long (ms) before it tries again
RETRY_MS = 2000
SEQ_DIGITS = 18


# -- frames ---------------------------------------------------------------------------------------


def frame(data: dict[str, Any], *, event: str | None = None, seq: int | None = None) -> bytes:
    """One SSE frame. ``json.dumps`` escapes newlines, so ``data`` is always a single line."""
    lines = []
    if seq is not None:
        lines.append(f"id: {seq}")
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


def comment(text: str) -> bytes:
    return f": {text}\n\n".encode()


def opening() -> bytes:
    return f"retry: {RETRY_MS}\n\n".encode()


#: a sequence number as clients send it: ASCII digits only (``str.isdigit`` also takes "²"),
#: at most 18 of them (always below 2**63, PostgreSQL's bigint)
SEQ_RE = re.compile(r"[0-9]{1,%d}" % SEQ_DIGITS)


def parse_seq(value: str | None, *, name: str) -> int | None:
    """A sequence number from ``Last-Event-ID``, ``?after=`` (SSE) or the websocket's
    ``?after=``: the one parser of all three. None when absent or empty; ValueError if malformed."""
    if value is None or value == "":
        return None
    value = value.strip(" \t")
    if not SEQ_RE.fullmatch(value):
        raise ValueError(f"{name} must be a sequence number: 1 to {SEQ_DIGITS} digits 0-9")
    return int(value)


# -- following the log ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Item:
    """What a follower yields: a committed event (``seq`` set), a live delta (``seq`` None), or
    an idle tick (``data`` None) that lets the caller send a keep-alive or stop on a deadline."""

    seq: int | None
    data: dict[str, Any] | None

    @property
    def terminal(self) -> bool:
        return self.seq is not None and self.data is not None and self.data.get("type") in TERMINAL_TYPES


class SessionFollower:
    """Follow a session's event log after ``after``, then live; optionally only one turn's events.

    Open it (``async with``) *before* starting the turn it should see, so no delta published
    between the start and the subscription is lost; committed events can never be lost, since
    they are re-read from the log after the last sequence number seen.
    """

    def __init__(self, ref: SessionRef, *, after: int = 0, turn_id: str | None = None) -> None:
        self.ref = ref
        self.last = after
        self.turn_id = turn_id
        self.layer = get_channel_layer()
        # the in-memory layer never hears from workers in other processes: poll the log often
        in_process = self.layer is None or type(self.layer).__name__ == "InMemoryChannelLayer"
        self.poll = settings.JUNE_SSE_POLL_SECONDS or (0.25 if in_process else 2.0)
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=10_000)
        self.channel: str | None = None
        self._pump: asyncio.Task | None = None
        #: seq of the last message.completed (or terminal event) yielded, per turn
        self._completed: dict[str | None, int] = {}
        #: subagents: the children followed (from ``child.started``), with their last seq
        self.children = ChildLogs()

    async def __aenter__(self) -> SessionFollower:
        if self.layer is not None:
            try:
                self.channel = await self.layer.new_channel()
                await follows.join(self.layer, group_name(self.ref), self.channel)
                self._pump = asyncio.create_task(self._receive())
            except Exception:  # no layer: the log poll alone still delivers every event
                log.exception("subscribing to %s failed; polling the event log only", self.ref)
                self.channel = None
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            # a layer receive can sit in a shielded blocking pop (channels_redis) for seconds
            # after the cancel: never hold the end of the response for it
            await asyncio.wait({self._pump}, timeout=1.0)
            self._pump = None
        if self.channel is not None:
            channel, self.channel = self.channel, None
            with contextlib.suppress(Exception):
                await self.layer.group_discard(group_name(self.ref), channel)

    async def _receive(self) -> None:
        # one long-lived receive loop (not a receive per wait): cancelling a layer receive
        # mid-message is what loses messages
        while True:
            message = await self.layer.receive(self.channel)
            if self.inbox.full():  # a stalled reader: drop deltas, the log still has the events
                with contextlib.suppress(asyncio.QueueEmpty):
                    self.inbox.get_nowait()
            self.inbox.put_nowait(message)

    async def read_log(self) -> list[Item]:
        """Committed events after the last seen, in order, through the store (the truth)."""
        store = wiring.store()
        out: list[Item] = []
        while True:
            batch = await db(store.events_sync)(self.ref, self.last, 500)
            for logged in batch:
                self.last = logged.seq
                data = logged.event.to_json()
                if logged.at is not None:
                    data["at"] = logged.at
                if self.turn_id is None or data.get("turn_id") == self.turn_id:
                    out.append(Item(logged.seq, data))
                    self.children.found(data)
            if len(batch) < 500:
                # the children's events before the turn's end (a stream stops at its terminal event)
                kids = [Item(None, data) for data in await self.children.read()]
                end = next((i for i, item in enumerate(out) if item.terminal), len(out))
                return out[:end] + kids + out[end:]

    async def items(self) -> AsyncIterator[Item]:
        """Log first, then live: every committed event exactly once, in seq order; deltas as
        they come; an idle tick whenever nothing arrived for a poll interval.

        The log is re-read when the doorbell rings (before any delta queued behind it, so text
        and the event that commits it keep the sink's order) and after a quiet poll interval
        (a lost doorbell costs latency, not an event)."""
        read = True
        while True:
            if read:
                for item in await self.read_log():
                    self._note(item)
                    yield item
            message = await self._next_message(self.poll)
            read = message is None
            while message is not None and not read:
                if message.get("type") == "june.delta":
                    for data in _deltas(message):
                        if self._wanted_delta(data):
                            yield Item(None, data)
                elif message.get("type") == "june.events":
                    read = True  # the doorbell: re-read the log (the truth) before anything after it
                    break
                message = self._next_nowait()
            if message is None and read:
                for data in await self.children.read():  # children: from their logs, each poll
                    yield Item(None, data)
                yield Item(None, None)

    def _note(self, item: Item) -> None:
        data = item.data or {}
        if data.get("type") == "message.completed" or item.terminal:
            self._completed[data.get("turn_id")] = item.seq or 0

    def _wanted_delta(self, data: dict[str, Any]) -> bool:
        """This turn's, and not text of a message already committed (``base`` is the seq the
        sink had published when the delta was made: a later message.completed supersedes it)."""
        turn_id = data.get("turn_id")
        if self.turn_id is not None and turn_id != self.turn_id:
            return False
        base = data.get("base")
        return not isinstance(base, int) or self._completed.get(turn_id, -1) <= base

    async def _next_message(self, timeout: float) -> dict[str, Any] | None:
        if self._pump is None:
            await asyncio.sleep(timeout)
            return None
        try:
            return await asyncio.wait_for(self.inbox.get(), timeout)
        except TimeoutError:
            return None

    def _next_nowait(self) -> dict[str, Any] | None:
        try:
            return self.inbox.get_nowait()
        except asyncio.QueueEmpty:
            return None


def _deltas(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A delta message carries ``event`` (one) or ``events`` (coalesced); accept both."""
    if isinstance(message.get("event"), dict):
        return [message["event"]]
    return [e for e in message.get("events") or () if isinstance(e, dict)]


async def event_stream(
    follower: SessionFollower,
    *,
    until_terminal: bool,
    limit: int | None = None,
    max_seconds: float | None = None,
    first: Sequence[dict[str, Any]] = (),
) -> AsyncIterator[bytes]:
    """SSE bytes from a follower (which this generator closes): ``first`` (frames without an id:
    a started turn's ``turn.queued``), then committed events with ``id:``, deltas without,
    keep-alive comments while idle. Ends after the first terminal event when ``until_terminal``,
    after ``limit`` committed events, or after ``max_seconds``."""
    keepalive = settings.JUNE_SSE_KEEPALIVE_SECONDS
    deadline = time.monotonic() + max_seconds if max_seconds else None
    sent = 0
    last_write = time.monotonic()
    try:
        yield opening()
        for data in first:
            yield frame(data, event=data["type"])
        async for item in follower.items():
            now = time.monotonic()
            if item.data is not None:
                yield frame(item.data, event=item.data.get("type"), seq=item.seq)
                last_write = now
                if item.seq is not None:
                    sent += 1
                    if (until_terminal and item.terminal) or (limit is not None and sent >= limit):
                        return
            elif now - last_write >= keepalive:
                yield comment("keep-alive")
                last_write = now
            if deadline is not None and now >= deadline:
                yield comment("timeout")
                return
    finally:
        await follower.close()
