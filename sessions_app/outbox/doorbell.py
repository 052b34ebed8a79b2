"""The cancel doorbell: a live message to the worker running a turn. The request itself is a
row (honoured at the attempt's next commit or heartbeat); the doorbell only makes it prompt,
so a lost ring costs latency, never correctness.

``ring`` is the sending side (services, after the commit); ``cancel_listener`` the receiving
side (the executor's ``on_signals`` hook in a worker).

A worker receives through one listener per process (``ProcessDoorbell``): a daemon thread with
an event loop of its own, one channel of the process in the group of every turn an attempt of
the process runs (once it has run ``JOIN_AFTER``: a short turn never joins), and a table of
those attempts. An attempt only registers in the table and
leaves it, so it never waits on the layer and nothing of the doorbell is left in its loop when it
ends: its ``asyncio.run`` returns whatever the layer does with a cancel. (It used to run a
receive task in the attempt's loop and cancel it at the end; on Python 3.11 a cancel that lands
while redis-py sends BZPOPMIN is swallowed by ``asyncio.wait_for`` — CPython gh-86296, fixed in
3.12 — the receive then went on, and the worker's ``asyncio.run`` never returned.)"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from asgiref.sync import async_to_sync, sync_to_async
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers, get_channel_layer
from django.db import connection

from agents_app.runtime.control import Signals
from agents_app.runtime.seams import SessionRef
from sessions_app import models as m
from sessions_app.outbox.sink import group_name

log = logging.getLogger(__name__)

RECEIVE_RETRY_SECONDS = 1.0


def cancel_group(turn_id: str) -> str:
    return f"june.turn.{turn_id}"


def ring(turn_ids: Sequence[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for turn_id in turn_ids:
        try:
            async_to_sync(layer.group_send)(cancel_group(turn_id), {"type": "june.cancel", "turn_id": turn_id})
        except Exception:  # the row is the truth: the worker sees it at its next commit or heartbeat
            log.exception("cancel doorbell for %s failed", turn_id)


def title_changed(session: SessionRef, title: str) -> None:
    """Every open chat of ``session`` shows its new title (a rename in another tab): a frame
    sent as a delta is, not logged (a page opened later reads the title from the row)."""
    layer = get_channel_layer()
    if layer is None:
        return
    frame = {"type": "session.title", "title": title}
    try:
        async_to_sync(layer.group_send)(group_name(session), {"type": "june.delta", "event": frame})
    except Exception:  # a tab open elsewhere keeps the old title until it reloads
        log.exception("title doorbell for %s failed", session)


@dataclass(eq=False)
class Subscription:
    """One attempt listening on its turn's doorbell. Calling it unsubscribes (idempotent, never
    blocks). ``joined`` is set once the process's channel is in the turn's group: a ring sent
    after that reaches the attempt's signals (at most once, as every layer delivers)."""

    doorbell: ProcessDoorbell
    turn_id: str
    signals: Signals
    loop: asyncio.AbstractEventLoop
    joined: threading.Event = field(default_factory=threading.Event)

    def __call__(self) -> None:
        self.doorbell.leave(self)


#: an attempt joins its turn's cancel group once it has listened this long (seconds): a short
#: turn ends before and costs the doorbell nothing — no wake-up of its thread, no layer round
#: trip to join and none to leave; a cancel requested before the join is read from the row
#: when it joins, so it reaches the attempt at most about this late
JOIN_AFTER = 0.05


class ProcessDoorbell:
    """The process's doorbell receiver (see the module docstring). Group membership follows the
    table: the process's channel is in a turn's group while an attempt of the process that has
    listened for ``JOIN_AFTER`` listens for it; the changes are applied in order by one
    coroutine on the doorbell's loop, which looks at the table only while attempts listen
    (``_tick``, at the next attempt due to join)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self._lock = threading.Lock()
        self._attempts: dict[str, list[Subscription]] = {}
        #: under the lock: since when (monotonic) each turn in ``_attempts`` has been listened for
        self._since: dict[str, float] = {}
        #: under the lock: (since, turn) of each turn not yet due to join, oldest first; an entry
        #: whose turn left (or came back later, with a later since) is dropped when it is reached
        self._pending: collections.deque[tuple[float, str]] = collections.deque()
        #: under the lock: the turns due to be in their group (asked of ``_keep_memberships``)
        self._wanted: set[str] = set()
        #: under the lock: a ``_tick`` is scheduled on the doorbell's loop
        self._ticking = False
        self._joined: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Queue[str] = asyncio.Queue()
        self._thread = threading.Thread(target=self._run, name="june-doorbell", daemon=True)
        self._thread.start()

    def listen(self, turn_id: str, signals: Signals) -> Subscription:
        sub = Subscription(self, turn_id, signals, asyncio.get_running_loop())
        with self._lock:
            self._attempts.setdefault(turn_id, []).append(sub)
            if turn_id not in self._since:
                since = self._since[turn_id] = time.monotonic()
                self._pending.append((since, turn_id))
            wake, self._ticking = not self._ticking, True
            joined = turn_id in self._joined and turn_id in self._wanted
        if joined:  # another attempt of this process already has the turn's group
            sub.joined.set()
        if wake:
            self._loop.call_soon_threadsafe(self._tick)
        return sub

    def leave(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._attempts.get(sub.turn_id, [])
            if sub not in subs:
                return
            subs.remove(sub)
            if subs:
                return
            del self._attempts[sub.turn_id]
            self._since.pop(sub.turn_id, None)
            if sub.turn_id not in self._wanted:
                return  # it never asked to join: nothing to undo
            self._wanted.discard(sub.turn_id)
        self._loop.call_soon_threadsafe(self._changed.put_nowait, sub.turn_id)

    # -- on the doorbell's own loop --------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        channel = await self.layer.new_channel()
        await asyncio.gather(self._keep_memberships(channel), self._receive(channel))

    def _tick(self) -> None:
        """Ask for the groups of the turns listened for ``JOIN_AFTER`` or longer; look again when
        the next one is due, while any turn waits to join. The turns wait in the order they
        came (``_pending``), so a tick reads only the ones due: it read every turn the process
        listened for, twice, at each tick (hundreds of turns, a tick every few milliseconds
        while a burst of them arrived)."""
        now = time.monotonic()
        due: list[str] = []
        with self._lock:
            pending = self._pending
            while pending and now - pending[0][0] >= JOIN_AFTER:
                since, turn_id = pending.popleft()
                if self._since.get(turn_id) == since and turn_id not in self._wanted:
                    due.append(turn_id)
            self._wanted.update(due)
            nxt = pending[0][0] if pending else None
            self._ticking = nxt is not None
        for turn_id in due:
            self._changed.put_nowait(turn_id)
        if nxt is not None:
            self._loop.call_later(max(nxt + JOIN_AFTER - now, 0.001), self._tick)

    async def _keep_memberships(self, channel: str) -> None:
        while True:
            # every change queued so far, in order: the turns they join are read in one query
            changes = [await self._changed.get()]
            while not self._changed.empty():
                changes.append(self._changed.get_nowait())
            joined_now: list[str] = []
            for turn_id in changes:
                if await self._apply(turn_id, channel):
                    joined_now.append(turn_id)
            if joined_now:
                await self._requested_before(joined_now)

    async def _apply(self, turn_id: str, channel: str) -> bool:
        """Bring the channel's membership of ``turn_id``'s group in line with the table; True
        when it joined it now."""
        with self._lock:
            wanted = turn_id in self._wanted
        joined_now = False
        try:
            if wanted and turn_id not in self._joined:
                await self.layer.group_add(cancel_group(turn_id), channel)
                self._joined.add(turn_id)
                joined_now = True
            elif not wanted and turn_id in self._joined:
                self._joined.discard(turn_id)
                await self.layer.group_discard(cancel_group(turn_id), channel)
        except Exception:  # a doorbell: the row still carries the request
            log.exception("cancel doorbell: membership of %s failed", turn_id)
        if turn_id in self._joined:
            with self._lock:
                for sub in self._attempts.get(turn_id, ()):
                    sub.joined.set()
        return joined_now

    async def _requested_before(self, turn_ids: list[str]) -> None:
        """A ring sent before the join reached no one: a request already on the row is
        delivered now (one read per batch of joins: a burst of turns past ``JOIN_AFTER``
        together joins in one query, not one each)."""
        try:
            reasons = await _stored_reasons(turn_ids)
        except Exception:  # the attempt reads the request at its next commit or heartbeat
            log.exception("turns %s: the stored cancel requests could not be read", ", ".join(turn_ids[:5]))
            return
        for turn_id, reason in reasons.items():
            await self._deliver(turn_id, reason)

    async def _receive(self, channel: str) -> None:
        while True:
            try:
                message = await self.layer.receive(channel)
            except Exception:  # Redis away, say: rejoin every group once it answers again
                log.exception("cancel doorbell: receive failed; retrying in %s s", RECEIVE_RETRY_SECONDS)
                await asyncio.sleep(RECEIVE_RETRY_SECONDS)
                for turn_id in list(self._joined):
                    self._joined.discard(turn_id)
                    self._changed.put_nowait(turn_id)
                continue
            turn_id = message.get("turn_id")
            if message.get("type") == "june.cancel" and isinstance(turn_id, str):
                await self._deliver(turn_id, message.get("reason"))

    async def _deliver(self, turn_id: str, reason: str | None) -> None:
        with self._lock:
            subs = list(self._attempts.get(turn_id, ()))
        if not subs:
            return
        try:
            reason = reason or await _durable_reason(turn_id)
        except Exception:  # the attempt reads the request at its next commit or heartbeat
            log.exception("turn %s: live cancel not delivered (its reason could not be read)", turn_id)
            return
        log.info("turn %s: live cancel (%s)", turn_id, reason)
        for sub in subs:
            try:
                sub.loop.call_soon_threadsafe(sub.signals.cancel, reason)
            except RuntimeError:  # that attempt's loop has closed: it is over
                pass


#: turn ids per query of ``_stored_reasons`` (SQLite bounds a statement's parameters)
READ_CHUNK = 500
#: the cancel requests stored on some turns (``{ids}``: a placeholder per id). SQL, not the
#: ORM: every turn that calls a model joins, mostly one at a time, and compiling the queryset
#: each time cost more than running it
STORED_REASONS = "SELECT id, cancel_reason FROM {table} WHERE id IN ({ids}) AND cancel_reason IS NOT NULL"


async def _stored_reasons(turn_ids: list[str]) -> dict[str, str]:
    """The cancel requests stored on the turns ``turn_ids`` (those with one)."""

    def read() -> dict[str, str]:
        found: dict[str, str] = {}
        table = connection.ops.quote_name(m.Turn._meta.db_table)
        with connection.cursor() as cursor:
            for i in range(0, len(turn_ids), READ_CHUNK):
                chunk = turn_ids[i : i + READ_CHUNK]
                cursor.execute(STORED_REASONS.format(table=table, ids=", ".join(["%s"] * len(chunk))), chunk)
                found.update((pk, reason) for pk, reason in cursor.fetchall() if reason)
        return found

    return await sync_to_async(read)()


async def _stored_reason(turn_id: str) -> str | None:
    return (await _stored_reasons([turn_id])).get(turn_id)


async def _durable_reason(turn_id: str) -> str:
    return await _stored_reason(turn_id) or "requested"


_process: ProcessDoorbell | None = None
_process_lock = threading.Lock()


def _forget_after_fork() -> None:
    """A forked worker inherits the parent's table but not its thread: it starts its own."""
    global _process, _process_lock
    _process, _process_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def process_doorbell() -> ProcessDoorbell | None:
    """The process's doorbell receiver, started on first use (None without a layer that reaches
    a worker: an in-memory layer cannot leave its process, and is bound to one loop). A
    channels_redis layer is received through a client of its own, whose receive state belongs to
    the doorbell's loop; other layers (ours, ``outbox.layers``) receive on any loop."""
    global _process
    with _process_lock:
        if _process is None:
            layer = get_channel_layer()
            if layer is None or type(layer).__name__ == "InMemoryChannelLayer":
                return None
            if type(layer).__module__.startswith("channels_redis"):
                layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
            _process = ProcessDoorbell(layer)
        return _process


def cancel_listener(turn_id: str, signals: Signals) -> Callable[[], None]:
    """Listen on the turn's doorbell while the attempt runs (from the attempt's loop). Returns
    the unsubscribe (a ``Subscription``): it never blocks, and leaves nothing running in the
    attempt's loop."""
    doorbell = process_doorbell()
    return doorbell.listen(turn_id, signals) if doorbell else lambda: None
