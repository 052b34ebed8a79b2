"""Frames on an open chat socket after its login ended.

After ``is_active=false``, or after every ``django_session`` row of the user was deleted, a
``start`` frame on the socket opened before was acked and the turn ran as that user. Now every
frame that acts re-reads the login first (a frame on a dead login: an error frame, status 401,
then close 4401, and nothing done), and a logout or a deactivation closes the user's sockets at
once, without waiting for a frame; the user's other logins keep theirs."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session as DjangoSession
from django.test import Client

from sessions_app import models as m

from .support import make_user

pytestmark = pytest.mark.django_db(transaction=True)


def _login(user) -> tuple[Client, bytes]:
    client = Client()
    client.force_login(user)
    return client, f"sessionid={client.cookies['sessionid'].value}".encode()


async def _open(cookie: bytes, key: str = "w1") -> WebsocketCommunicator:
    from june_project.asgi import application

    comm = WebsocketCommunicator(
        application, f"/ws/agents/ops/sessions/{key}/", headers=[(b"origin", b"http://testserver"), (b"cookie", cookie)]
    )
    connected, _ = await comm.connect(timeout=30)
    assert connected
    while (await comm.receive_json_from(timeout=30))["type"] != "ready":
        pass
    return comm


async def _closed_with_401(comm: WebsocketCommunicator) -> None:
    """The socket says why (an error frame, status 401) and closes with 4401."""
    seen: list[Any] = []
    while True:
        out = await comm.receive_output(timeout=30)
        if out["type"] == "websocket.close":
            assert out.get("code") == 4401, (out, seen)
            break
        seen.append(out)
    assert any('"status": 401' in (o.get("text") or "") for o in seen), seen


async def _start(comm: WebsocketCommunicator, text: str = "hello") -> None:
    await comm.send_json_to({"type": "start", "text": text, "id": "f1"})


@pytest.mark.parametrize("ended_by", ["deleted sessions", "deactivated (bulk update: no signal)"])
def test_a_frame_after_the_login_ended_is_refused_and_closes(ended_by):
    """The login ends without any signal reaching the socket (rows deleted or updated in bulk,
    as an admin script would): the next frame finds out, acts on nothing, and closes."""
    user = make_user("vera")
    _, cookie = _login(user)

    async def scenario() -> None:
        comm = await _open(cookie)
        if ended_by == "deleted sessions":
            await database_sync_to_async(lambda: DjangoSession.objects.all().delete())()
        else:
            await database_sync_to_async(lambda: type(user).objects.filter(pk=user.pk).update(is_active=False))()
        await _start(comm)
        await _closed_with_401(comm)

    async_to_sync(scenario)()
    assert not m.Turn.objects.exists()


def test_deactivation_closes_the_users_sockets_at_once():
    """``is_active=False`` saved (the admin's checkbox): every socket of the user closes without
    waiting for a frame; another user's socket stays."""
    user, other = make_user("vera"), make_user("walt")
    _, cookie = _login(user)
    _, other_cookie = _login(other)

    async def scenario() -> None:
        comm, comm2 = await _open(cookie, "w1"), await _open(cookie, "w2")
        bystander = await _open(other_cookie, "w3")

        def deactivate() -> None:
            user.is_active = False
            user.save()

        await database_sync_to_async(deactivate)()
        await _closed_with_401(comm)
        await _closed_with_401(comm2)
        await _start(bystander)
        reply = await bystander.receive_json_from(timeout=30)
        while reply["type"] != "ack":
            reply = await bystander.receive_json_from(timeout=30)
        await bystander.disconnect()

    async_to_sync(scenario)()
    assert list(m.Turn.objects.values_list("session__key", flat=True)) == ["w3"]


def test_logout_closes_that_logins_sockets_and_keeps_the_others():
    """A logout (Django's ``logout``) closes the sockets opened with that login at once; the same
    user's socket from another browser (another login) keeps working."""
    user = make_user("vera")
    browser, cookie = _login(user)
    _, other_cookie = _login(user)

    async def scenario() -> None:
        comm = await _open(cookie, "w1")
        elsewhere = await _open(other_cookie, "w2")
        await database_sync_to_async(browser.logout)()
        await _closed_with_401(comm)
        await _start(elsewhere)
        reply = await elsewhere.receive_json_from(timeout=30)
        while reply["type"] != "ack":
            reply = await elsewhere.receive_json_from(timeout=30)
        await elsewhere.disconnect()

    async_to_sync(scenario)()
    assert list(m.Turn.objects.values_list("session__key", flat=True)) == ["w2"]


def test_sockets_per_user_are_bounded(settings):
    """400 sockets of one user were all accepted (the database's transactions 45 → 126 a second,
    the API's median 17 → 81 ms). At most ``JUNE_WS_MAX_PER_USER`` per user and process: the next
    is told why and closed with 4429; closing one makes room; another user is not affected."""
    settings.JUNE_WS_MAX_PER_USER = 3
    user, other = make_user("vera"), make_user("walt")
    _, cookie = _login(user)
    _, other_cookie = _login(other)

    async def scenario() -> None:
        from june_project.asgi import application

        open_ = [await _open(cookie, f"w{n}") for n in range(3)]
        extra = WebsocketCommunicator(
            application, "/ws/agents/ops/sessions/w9/", headers=[(b"origin", b"http://testserver"), (b"cookie", cookie)]
        )
        assert (await extra.connect(timeout=30))[0]
        first = await extra.receive_json_from(timeout=30)
        assert first["type"] == "error" and first["status"] == 429, first
        assert (await extra.receive_output(timeout=30)) == {"type": "websocket.close", "code": 4429}
        bystander = await _open(other_cookie, "o1")
        await open_[0].disconnect()
        again = await _open(cookie, "w9")
        for comm in (*open_[1:], bystander, again):
            await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.slow
@pytest.mark.skipif("not __import__('os').environ.get('REDIS_URL')", reason="the cross-process count is Redis's")
def test_sockets_per_user_are_bounded_across_two_web_processes(tmp_path):
    """Two daphnes sharing one Redis (the deploy behind a load balancer): the bound is the user's,
    not each process's. With ``JUNE_WS_MAX_PER_USER=3``, two sockets on one daphne and one on the
    other fill it; a fourth, on either, is closed with 4429; a close on one daphne makes room on
    the other; another user is not affected."""
    import asyncio
    import json

    import websockets

    from tests.hostile.server import start_daphne

    vera, walt = make_user("vera"), make_user("walt")
    cookies = {name: _login(user)[1].decode() for name, user in (("vera", vera), ("walt", walt))}
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    servers = [start_daphne(tmp_path / name, JUNE_WS_MAX_PER_USER="3") for name in ("a", "b")]
    a, b = (next(server) for server in servers)

    async def opened(server, who: str, key: str):
        """A socket of ``who`` on ``server``: (the socket, its first frame's type) — ``ready``
        after the replay, or ``error`` before a refusal's close."""
        ws = await websockets.connect(
            f"ws://127.0.0.1:{server.port}/ws/agents/ops/sessions/{key}/",
            additional_headers={"Cookie": cookies[who], "Origin": server.url},
            open_timeout=30,
        )
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if frame["type"] in ("ready", "error"):
                return ws, frame

    async def scenario() -> None:
        held = [
            (await opened(a, "vera", "v1"))[0],
            (await opened(a, "vera", "v2"))[0],
            (await opened(b, "vera", "v3"))[0],
        ]
        for server in (b, a):
            ws, frame = await opened(server, "vera", "v4")
            assert frame["type"] == "error" and frame["status"] == 429, frame
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 30)
            assert closed.value.rcvd.code == 4429
        bystander, frame = await opened(b, "walt", "w1")
        assert frame["type"] == "ready"
        await held[0].close()  # on daphne a
        await asyncio.sleep(0.5)  # its disconnect gives the place back
        again, frame = await opened(b, "vera", "v4")
        assert frame["type"] == "ready", frame
        for ws in (*held[1:], bystander, again):
            await ws.close()

    try:
        asyncio.run(scenario())
    finally:
        for server in servers:
            server.close()
