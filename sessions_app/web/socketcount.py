"""How many chat sockets one user holds (``JUNE_WS_MAX_PER_USER``), across web processes.

With the Redis channel layer (``REDIS_URL``: several web processes, maybe machines) the count is
a sorted set per user in that Redis, ``<layer prefix>:june:ws:<user id>``: one member per open
socket (its channel name), scored by when it lapses. Taking a place is one atomic script (drop
the lapsed members, count, add if under the cap); an open socket renews its place at every
catch-up look (``consumers.CATCHUP_SECONDS``), so the place of a socket whose process died
lapses after ``LAPSE_SECONDS`` without anyone giving it back; a close gives it back at once.
Redis unreachable: the socket is allowed and counted in this process only (logged): the bound
is a guard against one user's flood, not worth a chat that cannot open.

Without Redis (June's unix-socket layer: the web processes of one machine) the count is this
process's own (``_local``): with N web processes a user may hold N × the bound.
"""

from __future__ import annotations

import collections
import logging
import time
import weakref
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

#: seconds a place lasts without being renewed (several catch-up looks)
LAPSE_SECONDS = 30.0

TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

_local: collections.Counter[Any] = collections.Counter()
_clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _redis_config() -> tuple[str, str] | None:
    """(Redis address, key prefix) of the default channel layer when it is Redis's."""
    layer = settings.CHANNEL_LAYERS.get("default", {})
    if not str(layer.get("BACKEND", "")).startswith("channels_redis."):
        return None
    config = layer.get("CONFIG", {})
    host = (config.get("hosts") or [None])[0]
    address = host.get("address") if isinstance(host, dict) else host
    if not isinstance(address, str):
        return None
    return address, str(config.get("prefix", "asgi"))


def _client(address: str) -> Any:
    """One asyncio Redis client per event loop (a client is bound to the loop it connects on)."""
    import asyncio

    import redis.asyncio

    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = redis.asyncio.Redis.from_url(address, socket_timeout=5)
    return client


class Place:
    """One socket's place among its user's: ``take`` when it opens, ``renew`` now and then,
    ``give_back`` when it closes."""

    def __init__(self, user_pk: Any, member: str) -> None:
        self.user_pk, self.member = user_pk, member
        self.redis = _redis_config()
        self.key = f"{self.redis[1]}:june:ws:{user_pk}" if self.redis else ""
        self.local = False  # counted in ``_local`` (no Redis, or it failed at ``take``)

    async def take(self, cap: int) -> bool:
        """Whether the user may open one more socket (under ``cap``); counted if so."""
        if self.redis is not None:
            now = time.time()
            try:
                took = await _client(self.redis[0]).eval(
                    TAKE, 1, self.key, now, cap, now + LAPSE_SECONDS, self.member, int(LAPSE_SECONDS) + 5
                )
                return bool(took)
            except Exception as exc:  # noqa: BLE001 - Redis unreachable: counted here only
                log.warning("websocket count: Redis unreachable (%s); counting in this process", exc)
        if _local[self.user_pk] >= cap:
            return False
        _local[self.user_pk] += 1
        self.local = True
        return True

    async def renew(self) -> None:
        if self.redis is None or self.local:
            return
        try:
            client = _client(self.redis[0])
            await client.zadd(self.key, {self.member: time.time() + LAPSE_SECONDS}, xx=True)
            await client.expire(self.key, int(LAPSE_SECONDS) + 5)
        except Exception as exc:  # noqa: BLE001 - it lapses, and the next renew tries again
            log.warning("websocket count: renewing a place failed: %s", exc)

    async def give_back(self) -> None:
        if self.local:
            _local[self.user_pk] -= 1
            if _local[self.user_pk] <= 0:
                del _local[self.user_pk]
            self.local = False
            return
        if self.redis is not None:
            try:
                await _client(self.redis[0]).zrem(self.key, self.member)
            except Exception as exc:  # noqa: BLE001 - it lapses by itself
                log.warning("websocket count: giving a place back failed: %s", exc)
