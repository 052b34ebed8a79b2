"""The Redis channel layer (production, ``REDIS_URL``): channels_redis's, with a ``group_send``
that costs one round trip when nobody is in the group.

channels_redis looks a group's members up in two round trips (drop the expired ones, then read
the rest) before it sends anything. A worker publishes every commit of every turn to its
session's group (``outbox.sink``), and most of those groups are empty: nobody watches an API or
webhook turn, nor a chat nobody has open. Here both lookups are one script; an empty group ends
there, and a group with members is sent to by channels_redis's own ``group_send`` (which looks
the members up again: one round trip more than before, for a session someone watches)."""

from __future__ import annotations

import time
from typing import Any

from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer

#: channels_redis's two lookups of a group (its expired members dropped, the rest read), as one script
MEMBERS = "redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, ARGV[1]) return redis.call('ZRANGE', KEYS[1], 0, -1)"


class RedisChannelLayer(ChannelsRedisLayer):
    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        connection = self.connection(self.consistent_hash(group))
        if not await connection.eval(MEMBERS, 1, self._group_key(group), int(time.time()) - self.group_expiry):
            return  # nobody is in the group: the message would reach no one
        await super().group_send(group, message)
