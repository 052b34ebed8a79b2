"""A start is answered at once whatever the queue holds (issue 59): no door. Through the real
API and the real queue (the turns' rows; no cluster runs, so the turns stay queued): with
hundreds of turns waiting for a worker, a new turn's request is answered 202 with its turn
durably queued, a streaming start's first frame is ``turn.queued``, and the queue's depth is
what ``june_queue_depth`` reports. (Until issue 59 such a request waited at a door while the
queue was deeper than ``JUNE_ADMISSION_BACKLOG``: these tests asserted that wait.)"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.test import AsyncClient

from sessions_app import models as m
from sessions_app.outbox import queue
from sessions_app.web import admission
from tests.integration.test_api import BASE, Api, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held(monkeypatch):
    """No worker takes anything: the turns stay queued."""
    from sessions_app import services, wiring

    monkeypatch.setattr(services, "enqueue_head", lambda turn_id: None)
    monkeypatch.setattr(wiring, "enqueue_turn", lambda turn_id: None)


@pytest.fixture
def token():
    return token_for(make_user("alice"))


def tasks(count: int) -> None:
    """``count`` turns waiting for a worker, each first of its own session."""
    from agents_app.runtime.seams import SessionRef, TurnInput
    from sessions_app import wiring

    store = wiring.store()
    for n in range(count):
        store.create_turn_sync(SessionRef("ops", f"backlog-{n}"), TurnInput(text="hi"), turn_id=f"backlog{n}")


def test_a_start_is_answered_at_once_however_deep_the_queue(held, token):
    tasks(300)
    assert queue.queue_depth()[0] == 300
    api = Api(token)
    began = time.monotonic()
    for n in range(5):
        status, body, _ = api.post(f"{BASE}/s{n}/turns?wait=false", {"text": "hi"})
        assert status == 202 and body["status"] == "queued", body
    assert time.monotonic() - began < 5  # no wait for the workers (a door held each up to 30 s)
    assert m.Turn.objects.filter(status="queued").count() == 305


def test_a_streaming_start_says_turn_queued_at_once(held, token):
    tasks(300)

    async def first_frames() -> bytes:
        client = AsyncClient()
        response = await client.post(
            f"{BASE}/s1/turns",
            data={"text": "hi"},
            content_type="application/json",
            headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
        )
        assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
        chunks = response.streaming_content.__aiter__()
        got = b""
        while b"turn.queued" not in got:
            got += await asyncio.wait_for(chunks.__anext__(), 10)
        await chunks.aclose()
        return got

    got = asyncio.run(first_frames()).decode()
    assert "event: turn.queued\n" in got, got
    turn = m.Turn.objects.get(session__key="s1")
    assert f'"turn_id": "{turn.pk}"' in got or f'"turn_id":"{turn.pk}"' in got, got
    assert turn.status == "queued"


def test_on_sqlite_a_web_process_writes_two_starts_at_once(monkeypatch):
    """SQLite has one writer: a web process's starts wait on a semaphore, not on its lock (two
    write at once), so the workers' writes get their turn; on PostgreSQL they run as they come."""
    from django.db import connection

    from sessions_app import services

    active, most = [0], [0]
    lock = threading.Lock()

    def start(**kw):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        return kw["turn_id"]

    monkeypatch.setattr(services, "turn_start", start)
    threads = [threading.Thread(target=admission.start_turn, kwargs={"turn_id": str(n)}) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    if connection.vendor == "sqlite":
        assert most[0] == admission.SQLITE_WRITERS
    else:
        assert most[0] > admission.SQLITE_WRITERS
