"""Admission through the real API and the real queue (django-q2's task rows; no cluster runs, so
the test plays the workers by deleting the oldest rows): a new turn's request waits at the door
while more turns than the backlog wait for a worker and the workers are taking them; it goes in
once they have, or once nobody drains the queue; a bad request is answered at once."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

from sessions_app import models as m
from sessions_app.web import admission
from tests.fault.qcluster import wait_for
from tests.integration.test_api import BASE, Api, make_user, token_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def door(settings, monkeypatch):
    from sessions_app import services

    settings.JUNE_ADMISSION_BACKLOG = 3
    settings.JUNE_ADMISSION_WAIT = 30
    monkeypatch.setattr(services, "enqueue_head", lambda turn_id: None)  # the turns stay queued
    admission._gate.cache_clear()
    gate = admission.gate()
    assert gate is not None
    gate.period = 0.01
    yield gate
    admission.close()


@pytest.fixture
def token():
    return token_for(make_user("alice"))


@pytest.fixture
def api(token):
    return Api(token)


def tasks(count: int) -> list[int]:
    """``count`` tasks waiting for a cluster, oldest first (a waiting task's lock is its enqueue
    time)."""
    first = timezone.now() - timedelta(seconds=60)
    return [
        OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="-", lock=first + timedelta(milliseconds=n)).pk
        for n in range(count)
    ]


def take(ids: list[int], count: int) -> None:
    """The workers take the ``count`` oldest tasks."""
    OrmQ.objects.filter(pk__in=[ids.pop(0) for _ in range(count)]).delete()


def start_in_thread(token: str, session: str) -> tuple[threading.Thread, list]:
    """A start on a thread of its own (a request's, as under daphne); its answer lands in the list."""
    answers: list = []

    def post() -> None:
        answers.append(Api(token).post(f"{BASE}/{session}/turns?wait=false", {"text": "hi"}))

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread, answers


def holding(gate: admission.Gate, ids: list[int]) -> None:
    """The first request starts the gate's reader; then the workers take a task, and the
    reader sees the queue draining with more than the backlog in it."""
    take(ids, 1)
    wait_for(lambda: gate._drained_at > float("-inf"), timeout=10, what="the reader to see the queue drain")


def test_a_start_waits_while_the_workers_drain_a_long_queue(door, api, token):
    ids = tasks(8)
    status, body, _ = api.post(f"{BASE}/first/turns?wait=false", {"text": "hi"})
    assert status == 202, body  # nothing seen draining yet: in at once
    holding(door, ids)
    thread, answers = start_in_thread(token, "second")
    time.sleep(0.5)
    assert thread.is_alive() and not answers
    assert not m.Turn.objects.filter(session__key="second").exists()  # nothing created while it waits
    take(ids, 4)  # 3 left: the backlog, still full
    time.sleep(0.2)
    take(ids, 1)  # room
    thread.join(10)
    assert answers and answers[0][0] == 202, answers
    assert m.Turn.objects.filter(session__key="second", status="queued").count() == 1
    assert door.waited == 1


def test_a_queue_nobody_drains_keeps_nobody_waiting_for_long(door, api, token):
    ids = tasks(8)
    api.post(f"{BASE}/first/turns?wait=false", {"text": "hi"})
    holding(door, ids)
    began = time.monotonic()
    thread, answers = start_in_thread(token, "second")
    thread.join(10)
    assert answers and answers[0][0] == 202, answers
    assert time.monotonic() - began < admission.DRAINING + 2


def test_a_bad_start_is_answered_at_once_while_the_door_holds(door, api):
    ids = tasks(8)
    api.post(f"{BASE}/first/turns?wait=false", {"text": "hi"})
    holding(door, ids)
    began = time.monotonic()
    status, body, _ = api.post(f"{BASE}/second/turns?wait=false", {"text": ""})
    assert status == 400 and body["error"]["code"] == "bad_request", body
    status, body, _ = Api("not-a-token").post(f"{BASE}/second/turns?wait=false", {"text": "hi"})
    assert status == 401, body
    assert time.monotonic() - began < 0.5
    assert door.waited == 0


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
