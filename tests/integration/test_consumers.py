"""The chat websocket through the full ASGI stack (origin check, session auth, the consumer) on
the configured channel layer (the unix-socket layer on SQLite, Redis on PostgreSQL runs)."""

from __future__ import annotations

import json
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from agents_app.runtime import events as ev
from agents_app.runtime.seams import SessionRef
from sessions_app import models as m
from sessions_app import selectors
from sessions_app.outbox.sink import group_name
from sessions_app.web.consumers import MAX_FRAME_BYTES

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.usefixtures("settled")]

ORIGIN = (b"origin", b"http://testserver")


def application():
    from june_project.asgi import application

    return application


@sync_to_async
def make_user(name: str):
    return get_user_model().objects.create_user(name, password=f"pw-{name}-123")


@sync_to_async
def cookie_for(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(path: str, cookie: bytes | None = None, origin=ORIGIN) -> WebsocketCommunicator:
    headers = [origin] if origin else []
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application(), path, headers=headers)


@sync_to_async
def log_events(agent: str, key: str, owner, n: int, *, publish_none: bool = True) -> list[int]:
    """Append ``n`` events to the session's durable log (as the store would) and return their seqs."""
    s, _ = m.Session.objects.get_or_create(agent=agent, key=key, defaults={"owner": owner})
    s.refresh_from_db()
    seqs = []
    for _ in range(n):
        seq = s.event_seq + 1
        event = ev.MessageCompleted("t1", text=f"text {seq}", index=seq)
        m.Event.objects.create(session=s, generation=s.generation, seq=seq, type=event.type, data=event.to_json())
        s.event_seq = seq
        seqs.append(seq)
    m.Session.objects.filter(pk=s.pk).update(event_seq=s.event_seq)
    return seqs


async def publish(agent: str, key: str, seqs: list[int]) -> None:
    events = [{"seq": s, **ev.MessageCompleted("t1", text=f"text {s}", index=s).to_json()} for s in seqs]
    await get_channel_layer().group_send(group_name(SessionRef(agent, key)), {"type": "june.events", "events": events})


async def receive_until_ready(comm: WebsocketCommunicator) -> list[dict]:
    frames = []
    while True:
        frame = await comm.receive_json_from(timeout=30)
        if frame["type"] == "ready":
            return frames
        frames.append(frame)


async def assert_refused(comm: WebsocketCommunicator, code: int) -> None:
    connected, _ = await comm.connect(timeout=30)
    assert connected  # accepted so that the browser can read the close code
    frame = await comm.receive_json_from(timeout=30)
    assert frame["type"] == "error" and frame["code"] == "refused"
    closed = await comm.receive_output(timeout=30)
    assert closed == {"type": "websocket.close", "code": code}


async def test_anonymous_is_refused():
    await assert_refused(communicator("/ws/agents/ops/sessions/s1/"), 4401)


async def test_a_foreign_origin_is_refused():
    alice = await make_user("alice")
    comm = communicator(
        "/ws/agents/ops/sessions/s1/", await cookie_for(alice), origin=(b"origin", b"http://evil.example")
    )
    connected, _ = await comm.connect(timeout=30)
    assert not connected
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice), origin=None)
    connected, _ = await comm.connect(timeout=30)
    assert not connected


async def test_another_users_session_and_unknown_agent_are_refused():
    alice, bob = await make_user("alice"), await make_user("bob")
    await log_events("ops", "alices", alice, 2)
    await assert_refused(communicator("/ws/agents/ops/sessions/alices/", await cookie_for(bob)), 4403)
    await assert_refused(communicator("/ws/agents/nope/sessions/x/", await cookie_for(bob)), 4404)
    await assert_refused(communicator("/ws/agents/ops/sessions/x/?after=-1", await cookie_for(bob)), 4400)


async def test_catch_up_sends_only_events_after_the_given_seq():
    alice = await make_user("alice")
    await log_events("ops", "s1", alice, 5)
    comm = communicator("/ws/agents/ops/sessions/s1/?after=3", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    frames = await receive_until_ready(comm)
    assert [f["seq"] for f in frames] == [4, 5]
    assert frames[0]["type"] == "message.completed" and frames[0]["text"] == "text 4"
    await comm.disconnect()


async def test_no_gap_and_no_duplicate_across_the_replay_to_live_switch(monkeypatch):
    """Events committed while the replay reads the log arrive both in the log and live: each is
    sent once. A live event that skips ahead makes the consumer fill the gap from the log."""
    alice = await make_user("alice")
    await log_events("ops", "s1", alice, 3)
    real = selectors.events_since
    calls = {"n": 0}

    def events_since_with_a_commit_in_between(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:  # a worker commits seq 4 and publishes it while we replay
            from asgiref.sync import async_to_sync

            seqs = async_to_sync(log_events)("ops", "s1", alice, 1)
            async_to_sync(publish)("ops", "s1", seqs)
        return real(**kwargs)

    monkeypatch.setattr(selectors, "events_since", events_since_with_a_commit_in_between)
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    seen = [f["seq"] for f in await receive_until_ready(comm)]
    # live: a stale duplicate, then seq 6 while 5 reached only the log (its doorbell was lost)
    await publish("ops", "s1", [2])
    await log_events("ops", "s1", alice, 2)
    await publish("ops", "s1", [6])
    await publish("ops", "s1", [4, 5, 6])
    await log_events("ops", "s1", alice, 1)
    await publish("ops", "s1", [7])
    while not seen or seen[-1] != 7:
        seen.append((await comm.receive_json_from(timeout=30))["seq"])
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_a_live_event_the_log_does_not_hold_is_never_sent():
    """A session deleted and made anew under its name: a worker that remembers the old one may
    send its last batch (seq 60) to the new one's group, as a doorbell (``again``) or as an event
    past a gap. Sent on, its seq would hide the new session's events up to 60 and the page would
    wait for them forever; the consumer sends what the log holds instead."""
    alice = await make_user("alice")
    await log_events("ops", "s1", alice, 2)
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    seen = [f["seq"] for f in await receive_until_ready(comm)]
    group = group_name(SessionRef("ops", "s1"))
    old = [{"seq": 60, **ev.TurnCompleted("t0", text="the old session's").to_json()}]
    await get_channel_layer().group_send(group, {"type": "june.events", "events": old, "again": True})
    await log_events("ops", "s1", alice, 1)
    await get_channel_layer().group_send(group, {"type": "june.events", "events": old})
    await log_events("ops", "s1", alice, 1)
    await publish("ops", "s1", [4])
    while not seen or seen[-1] != 4:
        frame = await comm.receive_json_from(timeout=30)
        assert frame["seq"] != 60, frame
        seen.append(frame["seq"])
    assert seen == [1, 2, 3, 4]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_deltas_are_forwarded_live():
    alice = await make_user("alice")
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    delta = {"type": "message.delta", "turn_id": "t1", "text": "Hel", "offset": 0, "base": 1}
    await get_channel_layer().group_send(group_name(SessionRef("ops", "s1")), {"type": "june.delta", "event": delta})
    assert await comm.receive_json_from(timeout=30) == delta
    await comm.disconnect()


async def expect_error(comm: WebsocketCommunicator, payload: str, code: str, status: int) -> None:
    await comm.send_to(text_data=payload)
    frame = await comm.receive_json_from(timeout=30)
    assert frame["type"] == "error", frame
    assert (frame["code"], frame["status"]) == (code, status), frame
    await still_usable(comm)


async def still_usable(comm: WebsocketCommunicator) -> None:
    await comm.send_json_to({"type": "start", "text": "hello", "id": "probe"})
    while True:
        frame = await comm.receive_json_from(timeout=30)
        if frame.get("id") == "probe":
            break
    assert frame["type"] in ("ack", "error"), frame
    if frame["type"] == "ack":
        assert frame["for"] == "start" and frame["status"] == "queued"
    else:  # the parked session refuses starts: still an answer on an open socket
        assert frame["code"] == "session_suspended"


@sync_to_async
def park_session(agent: str, key: str, owner) -> str:
    s, _ = m.Session.objects.get_or_create(agent=agent, key=key, defaults={"owner": owner})
    turn_id = uuid.uuid4().hex
    m.Turn.objects.create(
        id=turn_id,
        session=s,
        order=99,
        generation=s.generation,
        status="suspended",
        pending={"request": {"id": "approve", "prompt": "ok?", "schema": {"type": "boolean"}}},
    )
    return turn_id


async def test_every_error_frame_leaves_the_socket_usable():
    alice, bob = await make_user("alice"), await make_user("bob")
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await still_usable(comm)
    await expect_error(comm, "{not json", "bad_request", 400)
    await expect_error(comm, "[1, 2]", "bad_request", 400)
    await expect_error(comm, json.dumps({"type": "launch"}), "bad_request", 400)
    await expect_error(
        comm, json.dumps({"type": "start", "text": "x" * (MAX_FRAME_BYTES + 1)}), "payload_too_large", 413
    )
    await expect_error(comm, json.dumps({"type": "start"}), "bad_request", 400)
    await expect_error(comm, json.dumps({"type": "start", "text": "hi", "replace": "yes"}), "bad_request", 400)
    await expect_error(comm, json.dumps({"type": "cancel"}), "bad_request", 400)
    await expect_error(comm, json.dumps({"type": "resume", "turn_id": "t", "input_id": "i"}), "bad_request", 400)
    # a turn of bob's session is not reachable through alice's socket
    bobs_turn = await park_session("ops", "bobs", bob)
    await expect_error(comm, json.dumps({"type": "cancel", "turn_id": bobs_turn}), "not_found", 404)
    await expect_error(
        comm,
        json.dumps({"type": "resume", "turn_id": bobs_turn, "input_id": "approve", "answer": True}),
        "not_found",
        404,
    )
    # bob's own socket: a parked session refuses a new turn (409), a wrong input id too
    comm_bob = communicator("/ws/agents/ops/sessions/bobs/", await cookie_for(bob))
    assert (await comm_bob.connect(timeout=30))[0]
    await receive_until_ready(comm_bob)
    await expect_error(comm_bob, json.dumps({"type": "start", "text": "another"}), "session_suspended", 409)
    await expect_error(
        comm_bob,
        json.dumps({"type": "resume", "turn_id": bobs_turn, "input_id": "other", "answer": True}),
        "conflict",
        409,
    )
    await comm_bob.disconnect()
    await comm.disconnect()


async def test_reset_acks_with_the_archived_name_and_the_event_arrives():
    alice = await make_user("alice")
    comm = communicator("/ws/agents/ops/sessions/s1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await comm.send_json_to({"type": "reset", "id": 7})
    frames = [await comm.receive_json_from(timeout=30), await comm.receive_json_from(timeout=30)]
    ack = next(f for f in frames if f["type"] == "ack")
    assert ack == {"type": "ack", "for": "reset", "id": 7, "previous_session": "s1#g0", "generation": 1}
    reset = next(f for f in frames if f["type"] == "session.reset")
    assert reset["previous_session"] == "s1#g0" and isinstance(reset["seq"], int)
    await comm.disconnect()


# -- the server-less layer and the sink's coalescing ---------------------------------------------------


async def test_the_server_less_layer_carries_messages_across_processes():
    import asyncio
    import shutil
    import sys
    import tempfile

    from sessions_app.outbox.layers import MAX_DATAGRAM, UnixSocketChannelLayer

    path = tempfile.mkdtemp(prefix="jl", dir="/tmp")
    try:
        layer = UnixSocketChannelLayer(path=path, capacity=3)
        channel = await layer.new_channel()
        await layer.group_add("g", channel)
        big = "x" * (MAX_DATAGRAM * 2)  # goes through a spool file
        script = (
            "import asyncio\n"
            "from sessions_app.outbox.layers import UnixSocketChannelLayer as L\n"
            f"layer = L(path={path!r})\n"
            "async def main():\n"
            "    await layer.group_send('g', {'type': 'x', 'n': 1})\n"
            f"    await layer.send({channel!r}, {{'type': 'y', 'big': {big!r}}})\n"
            "    await layer.group_send('other', {'type': 'not for us'})\n"
            "asyncio.run(main())\n"
        )
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert await asyncio.wait_for(layer.receive(channel), 30) == {"type": "x", "n": 1}
        assert await asyncio.wait_for(layer.receive(channel), 30) == {"type": "y", "big": big}
        # bounded: over capacity a group message is dropped, not queued
        for n in range(5):
            await layer.group_send("g", {"type": "z", "n": n})
        got = [await asyncio.wait_for(layer.receive(channel), 30) for _ in range(3)]
        assert [g["n"] for g in got] == [0, 1, 2]
        await layer.group_discard("g", channel)
        await layer.group_send("g", {"type": "z", "n": 9})
        await layer.send(channel, {"type": "last"})
        assert await asyncio.wait_for(layer.receive(channel), 30) == {"type": "last"}
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_the_server_less_layer_sends_a_session_only_to_processes_watching_it():
    """A group message went to every process's socket, members or not: every delta of every
    turn reached daphne and each worker, though a browser watched a handful of sessions."""
    import asyncio
    import os
    import shutil
    import tempfile

    from sessions_app.outbox.layers import UnixSocketChannelLayer

    path = tempfile.mkdtemp(prefix="jl", dir="/tmp")
    try:
        member, bystander, sender = (UnixSocketChannelLayer(path=path) for _ in range(3))
        channel = await member.new_channel()
        await bystander.new_channel()  # bound, in no group
        await sender.new_channel()
        sent: list[str] = []
        send_bytes = sender._send_bytes

        async def recording(to, data):
            sent.append(to.name)
            return await send_bytes(to, data)

        sender._send_bytes = recording
        session = group_name(SessionRef("ops", "watched"))
        await member.group_add(session, channel)
        assert os.listdir(os.path.join(path, f"g.{session}")) == [member._token]
        await sender.group_send(session, {"type": "x"})
        await sender.group_send(group_name(SessionRef("ops", "unwatched")), {"type": "y"})
        assert sent == [f"{member._token}.sock"]
        assert await asyncio.wait_for(member.receive(channel), 30) == {"type": "x"}
        await member.group_discard(session, channel)
        assert not os.path.exists(os.path.join(path, f"g.{session}"))
        await sender.group_send(session, {"type": "z"})
        assert sent == [f"{member._token}.sock"]
        # other groups (the cancel doorbell's: joined and left by every turn) mark nothing and
        # go to every other socket
        await member.group_add("june.turn.t1", channel)
        assert not os.path.exists(os.path.join(path, "g.june.turn.t1"))
        await sender.group_send("june.turn.t1", {"type": "ring"})
        assert sorted(sent[1:]) == sorted([f"{member._token}.sock", f"{bystander._token}.sock"])
        assert await asyncio.wait_for(member.receive(channel), 30) == {"type": "ring"}
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_the_server_less_layer_waits_for_a_busy_receiver_but_not_for_a_stalled_one():
    """A receiver's queue holds a few datagrams (``net.unix.max_dgram_qlen``, 10 by default) and
    its reader thread needs the GIL for each: a daphne at a full core under a burst drained it
    later than the 0.2 s a send waited, and 47 of 200 watched deltas were dropped in one run. A
    send now waits up to ``SEND_RETRY_SECONDS`` (backing off); after a drop, sends to that
    receiver do not wait again for ``STALLED_SECONDS``."""
    import asyncio
    import shutil
    import socket
    import tempfile
    import threading
    import time

    import msgpack

    from sessions_app.outbox import layers

    path = tempfile.mkdtemp(prefix="jl", dir="/tmp")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        to = layers.Path(path) / "jbusy.sock"
        receiver.bind(str(to))
        sender = layers.UnixSocketChannelLayer(path=path)
        data = msgpack.packb({"c": "x", "m": {"n": 0}}, use_bin_type=True)
        sock = sender._sender_socket()
        queued = 0
        with pytest.raises(BlockingIOError):  # fill the receiver's queue
            while queued < 10_000:
                sock.sendto(data, str(to))
                queued += 1
        drained: list[bytes] = []

        def drain_later() -> None:
            time.sleep(0.35)  # busier than the old bound (0.2 s) allowed
            receiver.settimeout(5)
            for _ in range(queued + 1):
                drained.append(receiver.recv(1024))

        reader = threading.Thread(target=drain_later)
        reader.start()
        began = time.monotonic()
        assert await sender._send_bytes(to, b"last")
        waited = time.monotonic() - began
        await asyncio.to_thread(reader.join, 10)
        assert drained[-1] == b"last" and 0.3 < waited < layers.SEND_RETRY_SECONDS
        # a receiver that stays full: the first send waits its bound and drops, the next does not wait
        for _ in range(queued):
            sock.sendto(data, str(to))
        began = time.monotonic()
        assert await sender._send_bytes(to, b"dropped")
        assert time.monotonic() - began >= layers.SEND_RETRY_SECONDS
        began = time.monotonic()
        assert await sender._send_bytes(to, b"dropped too")
        assert time.monotonic() - began < 0.1
    finally:
        receiver.close()
        shutil.rmtree(path, ignore_errors=True)


class RecordingLayer:
    def __init__(self):
        self.sent = []

    async def group_send(self, group, message):
        self.sent.append(message)


async def test_the_sink_coalesces_deltas_and_flushes_them_before_committed_events():
    from agents_app.runtime.seams import LoggedEvent
    from sessions_app.outbox.sink import ChannelsEventSink

    layer = RecordingLayer()
    sink = ChannelsEventSink(layer)
    ref = SessionRef("ops", "s1")
    await sink.publish(ref, [LoggedEvent(1, ev.TurnStarted("t1", text="hi"))])
    words = [f"w{n} " for n in range(200)]
    for word in words:  # a fast model: far more deltas than one window holds
        await sink.delta(ref, ev.MessageDelta("t1", text=word))
    await sink.publish(ref, [LoggedEvent(2, ev.MessageCompleted("t1", text="".join(words), index=1))])
    deltas = [msg["event"] for msg in layer.sent if msg["type"] == "june.delta"]
    assert 1 <= len(deltas) < 20
    assert layer.sent[-1]["type"] == "june.events" and layer.sent[-1]["events"][0]["seq"] == 2
    text = ""
    for d in deltas:
        assert d["base"] == 1 and d["turn_id"] == "t1"
        assert d["offset"] <= len(text)
        text = text[: d["offset"]] + d["text"]
    assert text == "".join(words)


@pytest.mark.slow
async def test_an_idle_socket_outlives_the_layers_blocking_receive():
    """Regression: redis-py 8 defaults socket_timeout to 5 s, channels_redis blocks 5 s in
    BZPOPMIN, so an idle consumer's receive raised TimeoutError and the socket closed (1011)."""
    import asyncio

    alice = await make_user("alice")
    comm = communicator("/ws/agents/ops/sessions/idle/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await asyncio.sleep(6.5)  # the idle spell itself is what is tested
    delta = {"type": "message.delta", "turn_id": "t1", "text": "still here", "offset": 0, "base": None}
    await get_channel_layer().group_send(group_name(SessionRef("ops", "idle")), {"type": "june.delta", "event": delta})
    assert await comm.receive_json_from(timeout=30) == delta
    await comm.disconnect()
