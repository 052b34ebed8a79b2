"""The cancel doorbell: a live message to the worker running a turn. The request itself is a
row (honoured at the attempt's next commit or heartbeat); the doorbell only makes it prompt,
so a lost ring costs latency, never correctness.

``ring`` is the sending side (services, after the commit); ``cancel_listener`` the receiving
side (the executor's ``on_signals`` hook in a worker).

A worker receives through one listener per process (``ProcessDoorbell``): a daemon thread with
an event loop of its own, one channel of the process in the group every ring goes to
(``CANCELS``: every worker process of the site is in it, each delivers to the attempts it runs;
cancels are rare, turns are not), and a table of those attempts. An attempt only registers in
the table and leaves it: it costs the layer nothing, never waits on it, and nothing of the
doorbell is left in its loop when it ends: its ``asyncio.run`` returns whatever the layer does
with a cancel. (It used to run a receive task in the attempt's loop and cancel it at the end; on
Python 3.11 a cancel that lands while redis-py sends BZPOPMIN is swallowed by
``asyncio.wait_for`` — CPython gh-86296, fixed in 3.12 — the receive then went on, and the
worker's ``asyncio.run`` never returned. And each attempt used to join a group of its turn's
own and leave it: three layer round trips a turn.)

A ring that finds no attempt of its turn here (it reached every process; or it came between a
claim's commit and its attempt's registration) is kept a while (``EARLY_SECONDS``): an attempt
that registers within it has the row read for its request. A ring sent while the process was not
in the group (before its first join, while Redis was away) reached no one: at each join the rows
of every attempt in the table are read, in one query, and their requests delivered."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
from contextlib import suppress
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


#: the group of every worker process's doorbell channel: where every ring goes
CANCELS = "june.cancels"


def ring(turn_ids: Sequence[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for turn_id in turn_ids:
        try:
            async_to_sync(layer.group_send)(CANCELS, {"type": "june.cancel", "turn_id": turn_id})
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
    blocks). ``joined`` is set once the process's channel is in ``CANCELS``: a ring sent after
    that reaches the attempt's signals (at most once, as every layer delivers)."""

    doorbell: ProcessDoorbell
    turn_id: str
    signals: Signals
    loop: asyncio.AbstractEventLoop
    joined: threading.Event = field(default_factory=threading.Event)

    def __call__(self) -> None:
        self.doorbell.leave(self)


#: how long (seconds) a ring that found no attempt of its turn here is kept for one that registers
EARLY_SECONDS = 30.0
#: at most this many such rings are kept (the oldest go first)
EARLY_MAX = 1000
#: how often (seconds) the process's channel is added to ``CANCELS`` again: a layer forgets a
#: membership after its ``group_expiry`` (a day, channels_redis's and ours), and Redis may have
#: restarted without the receive noticing
REJOIN_SECONDS = 600.0


class ProcessDoorbell:
    """The process's doorbell receiver (see the module docstring): the table of the attempts
    that listen, the process's channel in ``CANCELS``, the rings kept for attempts to come."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self._lock = threading.Lock()
        self._attempts: dict[str, list[Subscription]] = {}
        #: under the lock: the turns rung here with no attempt listening, when (monotonic)
        self._early: collections.OrderedDict[str, float] = collections.OrderedDict()
        #: under the lock: the process's channel is in ``CANCELS`` (since its last join)
        self._member = False
        self._loop = asyncio.new_event_loop()
        self._rejoin = asyncio.Event()
        self._thread = threading.Thread(target=self._run, name="june-doorbell", daemon=True)
        self._thread.start()

    def listen(self, turn_id: str, signals: Signals) -> Subscription:
        sub = Subscription(self, turn_id, signals, asyncio.get_running_loop())
        with self._lock:
            self._attempts.setdefault(turn_id, []).append(sub)
            rung = self._early.pop(turn_id, None)
            member = self._member
        if member:
            sub.joined.set()
        if rung is not None and time.monotonic() - rung < EARLY_SECONDS:  # rung just before: read the row
            asyncio.run_coroutine_threadsafe(self._requested_before([turn_id]), self._loop)
        return sub

    def leave(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._attempts.get(sub.turn_id, [])
            if sub in subs:
                subs.remove(sub)
                if not subs:
                    del self._attempts[sub.turn_id]

    # -- on the doorbell's own loop --------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        channel = await self.layer.new_channel()
        await asyncio.gather(self._keep_membership(channel), self._receive(channel))

    async def _keep_membership(self, channel: str) -> None:
        """Join ``CANCELS``, and again every ``REJOIN_SECONDS`` or when the receive failed; after
        a join that follows a time out of the group, deliver what the table's rows hold."""
        while True:
            try:
                await self.layer.group_add(CANCELS, channel)
            except Exception:  # a doorbell: the rows still carry the requests
                log.exception("cancel doorbell: joining the group failed; retrying in %s s", RECEIVE_RETRY_SECONDS)
                await asyncio.sleep(RECEIVE_RETRY_SECONDS)
                continue
            with self._lock:
                was, self._member = self._member, True
                subs = [sub for subs in self._attempts.values() for sub in subs]
            if not was:
                for sub in subs:
                    sub.joined.set()
                if subs:
                    await self._requested_before(sorted({sub.turn_id for sub in subs}))
            self._rejoin.clear()
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._rejoin.wait(), REJOIN_SECONDS)

    async def _requested_before(self, turn_ids: list[str]) -> None:
        """A ring sent while the process was out of the group, or before the attempt registered,
        reached no attempt: a request already on the row is delivered now (one read for all)."""
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
            except Exception:  # Redis away, say: join again once it answers, then read the rows
                log.exception("cancel doorbell: receive failed; retrying in %s s", RECEIVE_RETRY_SECONDS)
                with self._lock:
                    self._member = False
                await asyncio.sleep(RECEIVE_RETRY_SECONDS)
                self._rejoin.set()
                continue
            turn_id = message.get("turn_id")
            if message.get("type") == "june.cancel" and isinstance(turn_id, str):
                await self._deliver(turn_id, message.get("reason"))

    async def _deliver(self, turn_id: str, reason: str | None) -> None:
        with self._lock:
            subs = list(self._attempts.get(turn_id, ()))
            if not subs:  # kept for an attempt that registers soon (its claim just committed)
                self._early[turn_id] = time.monotonic()
                self._early.move_to_end(turn_id)
                while len(self._early) > EARLY_MAX:
                    self._early.popitem(last=False)
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
#: ORM: compiling the queryset cost more than running it
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
