"""Property: hostile websocket traffic through the full ASGI stack (origin check, session auth,
routing, the consumer). Every client frame of every type gets exactly one reply, an ack or an
error frame with a 4xx status, and the socket stays usable; every handshake, whatever its
path, query or origin, is accepted or closed, never an exception out of the application;
nothing reaches the log as an error; the database is consistent afterwards."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from sessions_app import models as m
from sessions_app import services
from sessions_app.web.consumers import MAX_FRAME_BYTES
from sessions_app.workers import tasks
from tests.settle import settle_tasks

from . import strategies as hs
from .support import ACCEPTED, CASES, SERVER_ERRORS, STATUSES, LogWatch, assert_consistent, hostile, make_user

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ["start", "cancel", "resume", "reset"]


def application():
    from june_project.asgi import application

    return application


@pytest.fixture
def watch():
    handler = LogWatch()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    assert not handler.problems(), handler.problems()[:5]


@pytest.fixture
def olga(watch):
    """An operator with a session whose turn is parked on the refund approval (so resume frames
    can reach the answer checks)."""
    user = make_user("olga", operator=True)
    rec = services.turn_start(agent="ops", key="w1", text="refund order 42 10", user=user, source="web")
    tasks.run_turn(rec.turn_id)
    client = Client()
    client.force_login(user)
    yield {"user": user, "cookie": f"sessionid={client.cookies['sessionid'].value}".encode(), "parked": rec.turn_id}
    assert_consistent()
    for turn in m.Turn.objects.filter(status="queued").order_by("session_id", "order"):
        tasks.run_turn(turn.pk)
    assert_consistent()


def _count(status: int) -> None:
    CASES["websocket frames"] += 1
    STATUSES["websocket frames", status] += 1
    if status < 300:
        ACCEPTED["websocket frames"] += 1
    if status >= 500:
        SERVER_ERRORS["websocket frames"] += 1


@st.composite
def frames(draw: st.DrawFn, parked: str) -> tuple[str, Any]:
    """("text", str) or ("bytes", bytes): a frame of a known or a hostile type."""
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return "bytes", draw(st.binary(max_size=30))
    if shape == 1:
        return "text", draw(hs.whole_bodies).decode("utf-8", "replace")[: MAX_FRAME_BYTES + 10]
    if shape == 2:
        return "text", '{"type":"start","text":"' + "x" * (MAX_FRAME_BYTES + 1) + '"}'
    kind = draw(st.one_of(st.sampled_from(KINDS), st.sampled_from(KINDS), hs.values))
    fields = {
        "type": hs.values,
        "text": st.one_of(hs.strings, hs.values),
        "replace": st.one_of(st.booleans(), hs.values),
        "turn_id": st.one_of(st.just(parked), hs.strings, hs.values),
        "input_id": st.one_of(st.just("approve-refund"), hs.strings, hs.values),
        "answer": st.one_of(st.booleans(), hs.values),
        "id": hs.values,
    }
    if shape <= 5:  # a well-formed frame of a known type, hostile values in its fields
        obj = {"type": draw(st.sampled_from(KINDS))}
        for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=4, unique=True)):
            if name != "type":
                obj[name] = draw(fields[name])
        return "text", hs.encode(obj, ascii_only=True).decode()
    raw = draw(hs.body_with(fields, raw_at=tuple(fields)))
    text = raw.decode("utf-8", "surrogatepass")
    if text.startswith("{") and text != "{}" and draw(st.booleans()):
        text = '{"type":' + json.dumps(kind) + "," + text[1:]
    elif text == "{}":
        text = json.dumps({"type": kind})
    # a websocket text frame is UTF-8 on the wire: what a server can receive is a valid str
    return "text", text.encode("utf-8", "replace" if _has_lone(text) else "strict").decode("utf-8", "replace")


def _has_lone(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


async def _exchange(cookie: bytes, sent: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    comm = WebsocketCommunicator(
        application(), "/ws/agents/ops/sessions/w1/", headers=[(b"origin", b"http://testserver"), (b"cookie", cookie)]
    )
    connected, _ = await comm.connect(timeout=30)
    assert connected
    while (await comm.receive_json_from(timeout=30))["type"] != "ready":
        pass
    replies = []
    try:
        for kind, payload in sent + [("text", '{"type": "reset", "id": "last"}')]:
            # send_input: empty frames too (send_to refuses them)
            await comm.send_input({"type": "websocket.receive", "bytes" if kind == "bytes" else "text": payload})
            while True:  # committed events and deltas may come in between: the reply is the ack/error
                frame = await comm.receive_json_from(timeout=30)
                if frame.get("type") in ("ack", "error"):
                    replies.append(frame)
                    break
    finally:
        await comm.disconnect()
        await settle_tasks()
    return replies


@hostile(50)
@given(data=st.data())
def test_every_frame_gets_one_4xx_or_ack_reply_and_the_socket_stays_usable(olga, data):
    sent = data.draw(st.lists(frames(olga["parked"]), min_size=1, max_size=5))
    replies = async_to_sync(_exchange)(olga["cookie"], sent)
    assert len(replies) == len(sent) + 1
    for frame in replies:
        status = frame["status"] if frame["type"] == "error" else 200  # an ack's "status" is the turn's
        _count(status)
        assert frame["type"] == "ack" or 400 <= status < 500, frame
        if frame["type"] == "error":
            assert isinstance(frame["message"], str) and "Traceback" not in frame["message"]
    assert replies[-1]["type"] == "ack" and replies[-1]["id"] == "last"  # usable to the end


paths = hs.mostly(
    hs.legal_keys.map(lambda k: f"/ws/agents/ops/sessions/{k}/"),
    st.one_of(
        st.sampled_from(
            [
                "/ws/agents/ops/sessions/w1/",
                "/ws/agents/ops/sessions/" + "k" * 201 + "/",
                "/ws/agents/ops/sessions/w1",
                "/ws/",
                "/",
                "/ws/agents/nope/sessions/x/",
                "/ws/agents/ops/sessions/%00/",
                "/ws/agents/ops/sessions/a%2Fb/",
            ]
        ),
        hs.strings.map(lambda s: "/ws/agents/ops/sessions/" + quote(s.encode("utf-8", "surrogatepass"), safe="") + "/"),
        hs.strings.map(lambda s: "/" + quote(s.encode("utf-8", "surrogatepass"), safe="/")),
    ),
)
queries = st.one_of(
    st.just(""),
    hs.legal_seqs.map(lambda s: "after=" + s),
    hs.seqs.map(lambda s: "after=" + quote(s.encode("utf-8", "surrogatepass"))),
    hs.strings.map(lambda s: quote(s.encode("utf-8", "surrogatepass"), safe="=&")),
)
origins = hs.mostly(
    st.sampled_from([b"http://testserver", b"http://testserver:80"]),
    st.one_of(
        st.sampled_from(
            [
                b"http://localhost:9999",
                b"null",
                b"",
                b"http://evil.example",
                b"https://testserver",
                b"http://testserver:8000",
            ]
        ),
        st.binary(max_size=20),
    ),
)


async def _handshake(path: str, query: str, origin: bytes, cookie: bytes) -> tuple[bool, Any]:
    comm = WebsocketCommunicator(
        application(), path + ("?" + query if query else ""), headers=[(b"origin", origin), (b"cookie", cookie)]
    )
    connected, code = await comm.connect(timeout=30)
    first = None
    if connected:
        first = await comm.receive_json_from(timeout=30)
        await comm.disconnect()
    await settle_tasks()
    return connected, (code, first)


@hostile(50)
@given(path=paths, query=queries, origin=origins)
def test_every_handshake_is_accepted_or_closed(olga, path, query, origin):
    connected, (code, first) = async_to_sync(_handshake)(path, query, origin, olga["cookie"])
    CASES["websocket handshakes"] += 1
    STATUSES["websocket handshakes", 101 if connected else 403] += 1  # 403: a rejected handshake
    if connected and first["type"] != "error":
        ACCEPTED["websocket handshakes"] += 1
    if connected:
        assert first["type"] in ("ready", "error") or "seq" in first, first
        if first["type"] == "error":
            assert 400 <= first["status"] < 500, first
    assert not m.Session.objects.exclude(key__in=["w1"]).filter(owner=None).exists()
