"""A worker's sink sends nothing for a session nobody follows (``outbox.follows``), and a
follower that joins mid-stream loses nothing: every committed event after the log read it
makes once joined (a batch sent again reveals what it must re-read), and the live deltas from
a bounded moment after it joined. On Redis (in this process, and a publisher in a process of
its own) and on the in-memory layer (which always sends)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agents_app.runtime import events as ev
from agents_app.runtime.seams import LoggedEvent, SessionRef
from sessions_app.outbox import follows
from sessions_app.outbox.sink import ChannelsEventSink, group_name

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="REDIS_URL is not set")

STEPS = 60  # a committed event, then five deltas 10 ms apart: about 3 s of stream
#: a follower gets the deltas of every step that begins this long after it joined
BOUND = 1.0


def redis_layer():
    from channels_redis.core import RedisChannelLayer

    return RedisChannelLayer(hosts=[{"address": REDIS_URL}], prefix=f"june-test-follows-{uuid.uuid4().hex[:8]}")


def memory_layer():
    from channels.layers import InMemoryChannelLayer

    return InMemoryChannelLayer()


async def stream(sink: ChannelsEventSink, ref: SessionRef, log: list[int], starts: dict[int, float]) -> None:
    """A turn's events and deltas through ``sink``; ``log`` is the event log (seqs committed)."""
    loop = asyncio.get_running_loop()
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    log.append(1)
    for step in range(STEPS):
        starts[step] = loop.time()
        for word in range(5):
            await sink.delta(ref, ev.MessageDelta("t1", text=f"s{step}w{word} "))
            await asyncio.sleep(0.01)
        seq = step + 2
        await sink.publish(ref, [LoggedEvent(seq, ev.MessageCompleted("t1", text=f"step {step}", index=seq))])
        log.append(seq)
    await sink.publish(ref, [LoggedEvent(STEPS + 2, ev.TurnCompleted("t1", text="done"))])
    log.append(STEPS + 2)


async def runner_loop(coro):
    """``coro`` on a loop that says it lives as long as its process, as a worker's runner's does
    (a sink listens for followers there only)."""
    from agents_app.providers import long_lived_loop

    async with long_lived_loop():
        return await coro


async def follow(layer, ref: SessionRef, log_read, until: int) -> tuple[int, dict[int, float]]:
    """Join, read the log, then take the layer's messages until the log holds ``until``: the
    highest seq known (a batch past the one read means: read the log again, it holds all up to
    it) and, per step, when its first delta arrived."""
    loop = asyncio.get_running_loop()
    channel = await layer.new_channel()
    await follows.join(layer, group_name(ref), channel)
    known = log_read()  # after the join: what the log holds now
    deltas: dict[int, float] = {}
    while known < until:
        message = await asyncio.wait_for(layer.receive(channel), 10)
        if message["type"] == "june.events":
            known = max(known, *(e["seq"] for e in message["events"]))
        elif message["type"] == "june.delta":
            step = int(message["event"]["text"].split("w", 1)[0][1:])  # "s<step>w<word> …"
            deltas.setdefault(step, loop.time())
    await layer.group_discard(group_name(ref), channel)
    return known, deltas


@pytest.mark.slow
@pytest.mark.parametrize("make", [pytest.param(redis_layer, marks=needs_redis), memory_layer], ids=["redis", "memory"])
@pytest.mark.parametrize("join_after", [0.3, 1.0])
async def test_a_follower_joining_mid_stream_loses_no_event_and_gets_the_deltas(make, join_after):
    layer = make()
    sink = ChannelsEventSink(layer, background=True)
    ref = SessionRef("ops", f"race-{uuid.uuid4().hex[:8]}")
    log: list[int] = []
    starts: dict[int, float] = {}
    publisher = asyncio.create_task(runner_loop(stream(sink, ref, log, starts)))
    await asyncio.sleep(join_after)
    skipped_before = sink.skipped_messages
    joined = asyncio.get_running_loop().time()
    known, deltas = await follow(layer, ref, lambda: log[-1] if log else 0, STEPS + 2)
    await publisher
    await sink.close()
    assert known == STEPS + 2  # the terminal event reached it (live, or by a re-read it was told of)
    late = [step for step, began in starts.items() if began > joined + BOUND]
    assert late, "the stream ended too soon after the join to say anything of deltas"
    assert [step for step in late if step not in deltas] == []
    if make is redis_layer:
        assert skipped_before > 0  # nobody followed: the sink sent nothing before the join
        assert sink.sent_messages > 0


async def until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not {what} within 5 s")


class Commands:
    """Counts the commands this process sends Redis (not the listener's pub/sub reads)."""

    def __enter__(self):
        from redis.asyncio.client import Pipeline, Redis

        self.count, self.names = 0, []
        self._real = Redis.execute_command, Pipeline.execute
        real_command, real_pipeline = self._real

        async def command(client, *args, **options):
            self.count += 1
            self.names.append(str(args[0]))
            return await real_command(client, *args, **options)

        async def pipeline(pipe, *args, **options):
            self.count += 1
            self.names += [str(c[0][0]) for c in pipe.command_stack]
            return await real_pipeline(pipe, *args, **options)

        Redis.execute_command, Pipeline.execute = command, pipeline
        return self

    def __exit__(self, *exc):
        from redis.asyncio.client import Pipeline, Redis

        Redis.execute_command, Pipeline.execute = self._real


@needs_redis
async def test_nobody_following_costs_no_question_once_the_snapshot_is_in_hand():
    from agents_app.providers import long_lived_loop

    async with long_lived_loop():
        await _three_turns_alone()


async def _three_turns_alone():
    layer = redis_layer()
    sink = ChannelsEventSink(layer, background=True)
    ref = SessionRef("ops", f"alone-{uuid.uuid4().hex[:8]}")
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    await until(lambda: sink._followers.ready, "subscribed with a snapshot")  # (the first message starts it)
    asked = 0
    real = follows.has_members

    async def counting(layer_, group):
        nonlocal asked
        asked += 1
        return await real(layer_, group)

    follows.has_members, sent = counting, sink.sent_messages
    try:
        with Commands() as redis:
            for turn in range(3):
                tid = f"t{turn + 2}"
                await sink.publish(ref, [LoggedEvent(10 * turn + 2, ev.TurnStarted(tid, text="hi"))])
                for word in range(20):
                    await sink.delta(ref, ev.MessageDelta(tid, text=f"w{word} "))
                await sink.publish(ref, [LoggedEvent(10 * turn + 3, ev.TurnCompleted(tid, text="done"))])
                for outbox in list(sink._outboxes.values()):
                    await outbox.join()
            # a session first seen after the snapshot: decided without a question either
            other = SessionRef("ops", f"alone-{uuid.uuid4().hex[:8]}")
            await sink.publish(other, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
            await sink.publish(other, [LoggedEvent(2, ev.TurnCompleted("t1", text="done"))])
    finally:
        follows.has_members = real
    await sink.close()
    assert sink.sent_messages == sent  # not one message to the layer
    assert asked == 0  # nobody joined: not in the snapshot, none heard
    assert redis.names == []  # not one command to Redis for them


async def test_a_sink_on_a_loop_of_one_turn_sends_everything():
    """``asyncio.run`` per turn (a task outside a runner): no listener, every message sent."""

    class Layer:
        def __init__(self):
            self.sent = []

        async def group_send(self, group, message):
            self.sent.append(message)

    layer = Layer()
    sink = ChannelsEventSink(layer, background=True)
    sink._watching = True  # as on Redis
    ref = SessionRef("ops", "one-turn")
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    await sink.publish(ref, [LoggedEvent(2, ev.TurnCompleted("t1", text="done"))])
    await sink.close()
    assert [m["events"][0]["seq"] for m in layer.sent] == [1, 2]
    assert sink._listener is None and not sink._watching


async def test_a_follower_heard_while_the_sink_asks_is_sent_to():
    """The ask's answer may predate the join: the follower heard meanwhile wins."""

    class Layer:
        def __init__(self):
            self.sent = []

        async def group_send(self, group, message):
            self.sent.append(message)

    layer = Layer()
    sink = ChannelsEventSink(layer, background=False)
    sink._watching, sink._listening, sink._listener = True, True, object()
    ref = SessionRef("ops", "heard")
    asking = asyncio.Event()
    release = asyncio.Event()
    real = follows.has_members

    async def slow_no(layer_, group):
        asking.set()
        await release.wait()
        return False  # counted before the follower's add

    follows.has_members = slow_no
    try:
        first = asyncio.create_task(sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))]))
        await asking.wait()
        sink._on_follow(group_name(ref))  # heard while the ask is under way
        release.set()
        await first
        await sink.publish(ref, [LoggedEvent(2, ev.MessageCompleted("t1", text="x", index=1))])
    finally:
        follows.has_members = real
    assert [m["events"][0]["seq"] for m in layer.sent] == [1, 2]


async def test_a_follower_heard_after_skips_gets_the_last_batch_again():
    class Layer:
        def __init__(self):
            self.sent = []

        async def group_send(self, group, message):
            self.sent.append(message)

    layer = Layer()
    sink = ChannelsEventSink(layer, background=False)
    sink._watching, sink._listening, sink._listener = True, True, object()
    ref = SessionRef("ops", "late")
    real = follows.has_members

    async def nobody(layer_, group):
        return False

    follows.has_members = nobody
    try:
        await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
        await sink.delta(ref, ev.MessageDelta("t1", text="hello "))
        await sink.publish(ref, [LoggedEvent(2, ev.TurnCompleted("t1", text="hello"))])
        assert layer.sent == []
        sink._on_follow(group_name(ref))
        for _ in range(10):
            await asyncio.sleep(0)
    finally:
        follows.has_members = real
    assert [m["type"] for m in layer.sent] == ["june.events"]
    assert layer.sent[0]["events"][0]["seq"] == 2  # the terminal batch: the follower re-reads up to it
    assert layer.sent[0]["again"] is True  # a doorbell: the follower's consumer reads the log


async def test_a_message_of_a_session_nobody_follows_is_not_handed_to_a_sender():
    """Once the ask said nobody follows (and the listener listens), a background sink drops a
    session's messages where they are made: no sender is woken for a message it would drop,
    and a follower heard later still gets the last batch again."""

    class Layer:
        def __init__(self):
            self.sent = []

        async def group_send(self, group, message):
            self.sent.append(message)

    layer = Layer()
    sink = ChannelsEventSink(layer, background=True)
    sink._watching, sink._listening, sink._listener = True, True, object()
    ref = SessionRef("ops", "nobody")
    real = follows.has_members

    async def nobody(layer_, group):
        return False

    follows.has_members = nobody
    try:
        await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
        for outbox in list(sink._outboxes.values()):
            await outbox.join()  # asked: nobody
        skipped = sink.skipped_messages
        await sink.publish(ref, [LoggedEvent(2, ev.MessageCompleted("t1", text="x", index=1))])
        await sink.publish(ref, [LoggedEvent(3, ev.TurnCompleted("t1", text="x"))])
        assert [o.qsize() for o in sink._outboxes.values()] == [0]  # handed to no sender
        assert sink.skipped_messages == skipped + 2
        sink._on_follow(group_name(ref))
        for outbox in list(sink._outboxes.values()):
            for _ in range(10):
                await asyncio.sleep(0)
            await outbox.join()
    finally:
        follows.has_members = real
    sink._listener = None  # (the stand-in above, no task to cancel)
    await sink.close()
    assert [(m["events"][0]["seq"], m.get("again")) for m in layer.sent] == [(3, True)]


class Recorder:
    """A layer that records what it is sent (the sink's side of Redis is stood in for)."""

    group_expiry = 86400

    def __init__(self):
        self.sent = []

    async def group_send(self, group, message):
        self.sent.append(message)


async def listening(sink: ChannelsEventSink, snapshot) -> None:
    """Subscribed as a worker's sink is (the listener stood in for), with ``snapshot`` for its
    one look at the groups: the groups it finds (a dict), or a stand-in for ``follows.snapshot``."""
    sink._watching, sink._listener = True, object()
    if isinstance(snapshot, dict):
        found = snapshot

        async def snapshot(layer_):
            return found

    follows.snapshot = snapshot
    sink._on_ready(True)
    for _ in range(10):
        await asyncio.sleep(0)


async def stop(sink: ChannelsEventSink) -> None:
    sink._listener = None  # (``listening``'s stand-in: no task to cancel)
    await sink.close()


@pytest.fixture
def asks(monkeypatch):
    """The groups the sink asked Redis about (``has_members``), each answered by ``answers``
    (nobody, unless told)."""
    asked: list[str] = []
    answers: dict[str, bool] = {}

    async def has_members(layer, group):
        asked.append(group)
        return answers.get(group, False)

    monkeypatch.setattr(follows, "has_members", has_members)
    monkeypatch.setattr(follows, "snapshot", follows.snapshot)  # (``listening`` replaces it)
    return asked, answers


async def test_a_session_nobody_follows_is_asked_about_only_until_the_snapshot(asks):
    asked, _ = asks
    layer = Recorder()
    sink = ChannelsEventSink(layer, background=True)
    gate = asyncio.Event()

    async def slow_empty(layer_):
        await gate.wait()
        return {}

    await listening(sink, slow_empty)
    before, after = SessionRef("ops", "before"), SessionRef("ops", "after")
    await sink.publish(before, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    for outbox in list(sink._outboxes.values()):
        await outbox.join()
    assert asked == [group_name(before)]  # no snapshot yet: asked, as without one
    gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert sink._followers.ready
    await sink.publish(after, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    await sink.delta(after, ev.MessageDelta("t1", text="hello"))
    await sink.publish(after, [LoggedEvent(2, ev.TurnCompleted("t1", text="hello"))])
    assert asked == [group_name(before)]  # not in the snapshot, not heard: nobody, no question
    assert [o.qsize() for o in sink._outboxes.values()] == [0]  # and no sender woken
    assert layer.sent == []
    await stop(sink)


async def test_a_follower_heard_before_its_sessions_first_message_is_sent_to(asks):
    """A join heard for a group the sink knows nothing of yet is remembered: the session's
    first message is sent (asked about, as a group that may have a member)."""
    asked, answers = asks
    layer = Recorder()
    sink = ChannelsEventSink(layer, background=False)

    await listening(sink, {})
    ref = SessionRef("ops", "heard-first")
    sink._on_follow(group_name(ref))
    answers[group_name(ref)] = True
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    assert asked == [group_name(ref)]
    assert [m["events"][0]["seq"] for m in layer.sent] == [1]
    await stop(sink)


async def test_a_group_found_empty_when_asked_is_forgotten(asks):
    """A group in the snapshot whose follower left: asked once, then known empty."""
    asked, _ = asks
    layer = Recorder()
    sink = ChannelsEventSink(layer, background=False)
    ref = SessionRef("ops", "left")

    await listening(sink, {group_name(ref): time.time()})
    for turn in range(3):
        await sink.publish(ref, [LoggedEvent(2 * turn + 1, ev.TurnStarted(f"t{turn}", text="hi"))])
        await sink.publish(ref, [LoggedEvent(2 * turn + 2, ev.TurnCompleted(f"t{turn}", text="x"))])
    sink._follows.clear()  # (forgotten by the sink after a quiet spell)
    await sink.publish(ref, [LoggedEvent(9, ev.TurnStarted("t9", text="hi"))])
    assert asked == [group_name(ref)]
    assert layer.sent == []
    await stop(sink)


async def test_a_lost_listener_sends_everything_and_asks_until_a_new_snapshot(asks):
    asked, _ = asks
    layer = Recorder()
    sink = ChannelsEventSink(layer, background=False)

    await listening(sink, {})
    ref = SessionRef("ops", "lost")
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    assert layer.sent == [] and asked == []
    sink._on_ready(False)  # the connection dropped: a join now goes unheard
    assert sink._followers.may_follow(group_name(ref)) is None
    await sink.publish(ref, [LoggedEvent(2, ev.MessageCompleted("t1", text="x", index=2))])
    await sink.delta(ref, ev.MessageDelta("t1", text="more"))
    assert [m["type"] for m in layer.sent] == ["june.events", "june.delta"]
    gate = asyncio.Event()

    async def slow_empty(layer_):
        await gate.wait()
        return {}

    await listening(sink, slow_empty)  # back: the session found empty is asked about again
    other = SessionRef("ops", "lost-other")
    await sink.publish(other, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    assert sorted(asked) == sorted([group_name(ref), group_name(other)])  # no snapshot yet: asked
    sink._on_ready(False)
    gate.set()  # a snapshot of a subscription since lost is not trusted
    for _ in range(10):
        await asyncio.sleep(0)
    assert not sink._followers.ready
    await stop(sink)


def test_a_join_is_forgotten_once_its_member_has_expired():
    class Layer:
        group_expiry = 100

    followers = follows.Followers(Layer())
    followers.ready = True
    followers.joined = {"old": time.time() - 101, "new": time.time() - 99}
    followers._pruned = 0.0
    assert followers.may_follow("new") and not followers.may_follow("old")
    assert set(followers.joined) == {"new"}


@needs_redis
async def test_a_follower_that_joined_before_the_sink_subscribed_gets_everything():
    """Its join was told to nobody (no sink listened yet): the snapshot finds it."""
    await runner_loop(_joined_before())


async def _joined_before():
    layer = redis_layer()
    ref = SessionRef("ops", f"before-{uuid.uuid4().hex[:8]}")
    channel = await layer.new_channel()
    await layer.group_add(group_name(ref), channel)  # (no PUBLISH: as if before the subscription)
    sink = ChannelsEventSink(layer, background=True)
    warm = SessionRef("ops", f"warm-{uuid.uuid4().hex[:8]}")
    await sink.publish(warm, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])  # starts the listener
    await until(lambda: sink._followers.ready, "subscribed with a snapshot")
    assert sink._followers.may_follow(group_name(ref)) and not sink._followers.may_follow(group_name(warm))
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    await sink.delta(ref, ev.MessageDelta("t1", text="hello"))
    await sink.publish(ref, [LoggedEvent(2, ev.TurnCompleted("t1", text="hello"))])
    got = [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(3)]
    await sink.close()
    await layer.group_discard(group_name(ref), channel)
    assert [m["type"] for m in got] == ["june.events", "june.delta", "june.events"]
    assert [m["events"][0]["seq"] for m in got if m["type"] == "june.events"] == [1, 2]


PUBLISHER = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from channels_redis.core import RedisChannelLayer
from agents_app.runtime.seams import SessionRef
from sessions_app.outbox.sink import ChannelsEventSink
from tests.integration.test_follows import runner_loop, stream

async def main():
    layer = RedisChannelLayer(hosts=[{"address": sys.argv[2]}], prefix=sys.argv[3])
    sink = ChannelsEventSink(layer, background=True)
    log, starts = [], {}
    print(json.dumps({"ready": True}), flush=True)
    await runner_loop(stream(sink, SessionRef("ops", sys.argv[4]), log, starts))
    await sink.close()
    print(json.dumps({"skipped": sink.skipped_messages, "sent": sink.sent_messages, "starts": starts}), flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
@needs_redis
async def test_a_publisher_in_another_process_hears_the_follower():
    from channels_redis.core import RedisChannelLayer

    prefix = f"june-test-follows-{uuid.uuid4().hex[:8]}"
    key = f"proc-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISHER, str(ROOT), REDIS_URL, prefix, key,
        stdout=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert json.loads(await asyncio.wait_for(proc.stdout.readline(), 60)) == {"ready": True}
        await asyncio.sleep(0.8)
        layer = RedisChannelLayer(hosts=[{"address": REDIS_URL}], prefix=prefix)
        # the log read after the join: the publisher's process has committed some seq by then; a
        # follower that reads 0 must still reach the end (the batch sent again tells it to read)
        known, deltas = await follow(layer, SessionRef("ops", key), lambda: 0, STEPS + 2)
        report = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    assert known == STEPS + 2
    assert report["skipped"] > 0 and report["sent"] > 0
    assert len(deltas) >= 5  # live text from the join on (clocks differ: counted, not timed)
