"""The Redis channel layer (sessions_app/outbox/redislayer.py): a group nobody is in costs
``group_send`` one round trip and sends nothing; a group with members still gets every message
(channels_redis's own send); expired members count as gone, as channels_redis has them."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from channels_redis.core import RedisChannelLayer as ChannelsRedisLayer

from sessions_app.outbox.redislayer import RedisChannelLayer

pytestmark = pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL)")


def layer_and_spy(monkeypatch) -> tuple[RedisChannelLayer, list[str]]:
    sent: list[str] = []
    base = ChannelsRedisLayer.group_send

    async def spy(self, group, message):
        sent.append(group)
        await base(self, group, message)

    monkeypatch.setattr(ChannelsRedisLayer, "group_send", spy)
    return RedisChannelLayer(hosts=[os.environ["REDIS_URL"]]), sent


def test_a_member_gets_the_message_and_an_empty_group_costs_nothing_more(monkeypatch):
    layer, sent = layer_and_spy(monkeypatch)
    group = f"test.{uuid.uuid4().hex}"

    async def scenario():
        await layer.group_send(group, {"type": "x.one"})  # nobody yet
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await layer.group_send(group, {"type": "x.two"})
        received = await asyncio.wait_for(layer.receive(channel), 10)
        await layer.group_discard(group, channel)
        await layer.group_send(group, {"type": "x.three"})  # nobody any more
        return received

    received = asyncio.run(scenario())
    assert received["type"] == "x.two"
    assert sent == [group]  # only the send with a member went past the lookup


def test_expired_members_are_gone(monkeypatch):
    layer, sent = layer_and_spy(monkeypatch)
    group = f"test.{uuid.uuid4().hex}"

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        layer.group_expiry = -60  # every member is older than that
        await layer.group_send(group, {"type": "x.one"})
        members = await layer.connection(layer.consistent_hash(group)).zrange(layer._group_key(group), 0, -1)
        return members

    assert asyncio.run(scenario()) == [] and sent == []  # dropped, as channels_redis drops them
