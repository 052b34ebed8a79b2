"""Who follows a session, told to the processes that publish its events (Redis's layer).

A session's events and deltas go to its Channels group (``sink.group_name``); most sessions have
nobody in it (an API client that does not stream, a scheduled agent), and on channels_redis a
``group_send`` to an empty group still costs two round trips to Redis. So a worker's sink asks
once whether the group has a member (``has_members``, one round trip) and, when it has none,
sends nothing more for it, as long as it hears every new follower:

- a follower joins with ``join`` (``group_add``, then one ``PUBLISH`` of the group's name on the
  site's follows channel);
- a worker's sink listens on that channel (``watch``) for as long as its loop runs. Until it is
  subscribed, and whenever its connection drops, the sink treats every session as followed and
  sends everything (then checks again the ones it had found empty).

The race: a follower that joins right after the check is heard a moment later (Redis's pub/sub,
then the worker's loop). A follower catches up from the event log after it joined (the log is
the truth, the layer the doorbell: docs/ui.md); the events committed between that read and the
moment the worker hears it are the ones the worker did not send. So, on hearing it, the worker
sends the session's last committed batch again, marked ``again``: a doorbell, on which the
follower reads the log again (never the batch itself: the worker remembers a session by its name
for a while after its turn, and the batch may be of an earlier session of that name, deleted and
made anew). Deltas reach it from
that moment on, the next one with the whole text so far (a snapshot).

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
