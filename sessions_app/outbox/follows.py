"""Who follows a session, told to the processes that publish its events (Redis's layer).

A session's events and deltas go to its Channels group (``sink.group_name``); most sessions have
nobody in it (an API client that does not stream, a scheduled agent), and on channels_redis a
``group_send`` to an empty group still costs two round trips to Redis. So a worker's sink knows
which groups have a member (``Followers``) and sends nothing for the others, as long as it
hears every new follower:

- a follower joins with ``join`` (``group_add``, then one ``PUBLISH`` of the group's name on the
  site's follows channel);
- a worker's sink listens on that channel (``watch``) for as long as its loop runs, and once
  subscribed takes one ``snapshot`` of the groups that have a live member (every Redis host of
  the layer): a join before the subscription is in the snapshot, one after it is heard, one in
  between is both. A session whose group is in neither has nobody: no question to Redis. A group
  in either may have lost its follower since; its session is asked about (``has_members``, one
  round trip) like a session of a sink without a snapshot. Until the snapshot is in hand, and
  whenever the listener's connection drops, the sink asks once per session, or sends everything
  while not subscribed (then checks again the ones it had found empty).

The race: a follower that joins right after the sink decided is heard a moment later (Redis's
pub/sub, then the worker's loop). A follower catches up from the event log after it joined (the
log is the truth, the layer the doorbell: docs/ui.md); the events committed between that read
and the moment the worker hears it are the ones the worker did not send. So, on hearing it, the
worker sends the session's last committed batch again, marked ``again``: a doorbell, on which
the follower reads the log again (never the batch itself: the worker remembers a session by its
name for a while after its turn, and the batch may be of an earlier session of that name,
deleted and made anew). Deltas reach it from that moment on, the next one with the whole text
so far (a snapshot).

Other layers need none of this: the in-memory layer's empty group costs a dict lookup, and the
unix-socket layer (``layers``) marks a session's group on disk before ``group_add`` returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

#: seconds between a listener's looks at a quiet connection (a dead one is found by its read)
LISTEN_TICK = 5.0
#: the wait before a lost listener connects again (doubling up to the last)
RETRY = (0.5, 8.0)
#: keys a snapshot's SCAN asks for per call, and group keys looked at per pipelined round trip
SCAN_COUNT = 1000
#: seconds between prunings of the groups a sink knows followed
PRUNE_EVERY = 60.0


def supported(layer: Any) -> bool:
    """Whether ``layer`` is channels_redis's (the one layer this module speaks to)."""
    return layer is not None and type(layer).__module__.startswith("channels_redis") and hasattr(layer, "connection")


def _channel(layer: Any) -> str:
    return f"{layer.prefix}:june.follows"


async def join(layer: Any, group: str, channel: str) -> None:
    """``group_add``, then tell the publishers (only after the add: a publisher that hears the
    name and checks the group finds the member)."""
    await layer.group_add(group, channel)
    if supported(layer):
        try:
            await layer.connection(0).publish(_channel(layer), group)
        except Exception:  # a publisher not told sends nothing: the follower's log reads still deliver
            log.exception("telling the publishers of %s's follower failed", group)


async def has_members(layer: Any, group: str) -> bool:
    """Whether ``group`` has a member that has not expired (one round trip)."""
    key = layer._group_key(group)
    connection = layer.connection(layer.consistent_hash(group))
    return bool(await connection.zcount(key, int(time.time()) - layer.group_expiry, "+inf"))


async def snapshot(layer: Any) -> dict[str, float]:
    """The groups that have a live member now, each with its newest member's join time (the
    layer's clock): the layer's group keys SCANned on every host, each looked at once (one
    pipelined round trip per ``SCAN_COUNT`` keys)."""
    head = layer._group_key("")
    pattern = b"".join(b"\\" + bytes([c]) if c in b"*?[]\\" else bytes([c]) for c in head) + b"*"
    oldest = time.time() - layer.group_expiry
    found: dict[str, float] = {}
    for index in range(layer.ring_size):
        connection = layer.connection(index)
        keys = list({key async for key in connection.scan_iter(match=pattern, count=SCAN_COUNT)})
        for start in range(0, len(keys), SCAN_COUNT):
            chunk = keys[start : start + SCAN_COUNT]
            async with connection.pipeline(transaction=False) as pipe:
                for key in chunk:
                    pipe.zrevrange(key, 0, 0, withscores=True)
                replies = await pipe.execute(raise_on_error=False)
            for key, newest in zip(chunk, replies):
                # (not a sorted set: a key of somebody else's under the prefix)
                if isinstance(newest, list) and newest and newest[0][1] >= oldest:
                    found[key[len(head) :].decode()] = newest[0][1]
    return found


class Followers:
    """The groups a worker's sink knows may have a member: ``snapshot``'s, taken after the
    listener (re)subscribed, and every join heard since. Each is forgotten the layer's
    ``group_expiry`` after its join (its member has expired by then unless it joined again, and
    heard again): the memory is bounded by the groups joined within that time."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.joined: dict[str, float] = {}  # group -> its last join known (the wall clock)
        #: the snapshot is in hand and the listener has listened since it was taken
        self.ready = False
        self._generation = 0  # subscriptions: a snapshot of an earlier one is not trusted
        self._task: asyncio.Task | None = None
        self._pruned = time.time()

    def subscribed(self) -> None:
        """The listener (re)subscribed: every join from now on is heard; snapshot the others."""
        self.lost()
        self.joined.clear()
        self._task = asyncio.ensure_future(self._snapshot(self._generation))

    def lost(self) -> None:
        """The listener's connection dropped: a join may go unheard until it subscribes again."""
        self._generation += 1
        self.ready = False

    def heard(self, group: str) -> None:
        self.joined[group] = time.time()

    def forget(self, group: str) -> None:
        """Asked (after every join heard): nobody is in ``group``; its next join will be heard."""
        self.joined.pop(group, None)

    def may_follow(self, group: str) -> bool | None:
        """False: nobody follows ``group`` (no need to ask); True: somebody may; None: not known
        (no snapshot in hand)."""
        if not self.ready:
            return None
        now = time.time()
        if now - self._pruned >= PRUNE_EVERY:
            self._pruned, oldest = now, now - self.layer.group_expiry
            self.joined = {g: t for g, t in self.joined.items() if t >= oldest}
        return group in self.joined

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.lost()

    async def _snapshot(self, generation: int) -> None:
        try:
            found = await snapshot(self.layer)
        except Exception:
            log.warning("the followers' snapshot failed; every session is asked about", exc_info=True)
            return
        if generation == self._generation:
            for group, joined in found.items():
                if joined > self.joined.get(group, 0.0):
                    self.joined[group] = joined
            self.ready = True


async def watch(layer: Any, on_follow: Callable[[str], None], on_ready: Callable[[bool], None]) -> None:
    """Run until cancelled: ``on_ready(True)`` once subscribed, ``on_follow(group)`` for every
    follower that joins anywhere from then on, ``on_ready(False)`` when the connection is lost
    (it is made again)."""
    pause = RETRY[0]
    while True:
        pubsub = None
        try:
            pubsub = layer.connection(0).pubsub(ignore_subscribe_messages=True)
            await pubsub.subscribe(_channel(layer))
            on_ready(True)
            pause = RETRY[0]
            while True:
                message = await pubsub.get_message(timeout=LISTEN_TICK)
                if message is not None and message.get("type") == "message":
                    data = message["data"]
                    on_follow(data.decode() if isinstance(data, bytes) else str(data))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the follows listener lost Redis; every session is sent to until it is back", exc_info=True)
        finally:
            on_ready(False)
            if pubsub is not None:
                try:
                    await asyncio.shield(pubsub.aclose())
                except BaseException:  # noqa: BLE001 (closing a broken connection: nothing to do)
                    pass
        await asyncio.sleep(pause)
        pause = min(pause * 2, RETRY[1])
