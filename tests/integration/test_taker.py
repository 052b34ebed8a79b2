"""Queued turns delivered by their own rows (``sessions_app.workers.taker``): what a runner takes,
the mark a take leaves and when it runs out, two runners taking at once, the claim after a take,
a worker's runner taking turns with no django-q2 task, and a runner's wake-up.

On real clusters: a turn queued while no worker runs runs when one starts; a turn whose taker was
killed before its claim runs elsewhere once the mark runs out; a cluster's prompt stop hands its
dead workers' marks on at once."""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.db import connection, connections

from sessions_app import models as m
from sessions_app import services
from sessions_app.workers.taker import take
from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "faultagent"


def start(key: str, text: str = "steps:1") -> str:
    return services.turn_start(agent=AGENT, key=key, text=text, source="http").turn_id


def test_a_take_marks_the_chain_heads_oldest_first_and_skips_a_live_mark(fault_agent):
    a, b = start("one"), start("one")
    c = start("two")
    now = time.time()
    assert take("host:1", 1, now=now, window=5) == [a], "oldest first, one at most"
    assert take("host:2", 10, now=now, window=5) == [c], "a is taken (its mark is live); b waits for a"
    turn = m.Turn.objects.get(pk=a)
    assert turn.status == "queued" and turn.lease_owner == "taken:host:1" and turn.lease_expires_at == now + 5
    assert take("host:2", 10, now=now + 4.9, window=5) == []
    assert take("host:2", 10, now=now + 5.1, window=5) == [a, c], "the marks ran out: their takers are gone"
    assert b not in take("host:3", 10, now=now + 20, window=5)


def test_the_claim_after_a_take_is_the_fence(fault_agent):
    """Any runner's claim wins a taken turn (the mark is no lease); the claim takes it once."""
    from sessions_app import wiring

    turn_id = start("fenced")
    assert take("host:1", 10) == [turn_id]
    store = wiring.store()
    now = time.time()
    assert store.claim_sync(turn_id, owner="host:2", attempt_id="x2", now=now, lease_seconds=10)
    assert not store.claim_sync(turn_id, owner="host:1", attempt_id="x1", now=now, lease_seconds=10)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == "running" and turn.lease_owner == "host:2" and turn.attempts == 1
    assert take("host:3", 10) == []


def test_a_swept_turn_is_taken_and_claimed_though_running(fault_agent):
    """The sweeper marks an expired lease for re-delivery (``swept:``): a runner takes it, and
    its claim succeeds although the take's mark put the expiry ahead."""
    from sessions_app import wiring
    from sessions_app.workers.sweeper import sweep_expired

    turn_id = start("swept")
    store = wiring.store()
    now = time.time()
    assert store.claim_sync(turn_id, owner="dead:1", attempt_id="a1", now=now - 100, lease_seconds=1)
    assert take("host:1", 10) == [], "not yet looked at by the sweeper"
    assert sweep_expired(now=now)["redelivered"] == 1
    assert take("host:1", 10, now=now + 0.01) == [turn_id]
    assert take("host:2", 10, now=now + 0.02) == []
    assert store.claim_sync(turn_id, owner="host:1", attempt_id="a2", now=now + 0.03, lease_seconds=10)
    assert m.Turn.objects.get(pk=turn_id).attempts == 2


def test_runners_taking_at_once_never_take_one_turn_twice(fault_agent):
    """Eight threads take from the same 40 turns at once (SKIP LOCKED on PostgreSQL, the write
    lock on SQLite): each turn is taken exactly once."""
    turns = {start(f"race-{n}") for n in range(40)}
    taken: list[list[str]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def runner(n: int) -> None:
        try:
            barrier.wait()
            while got := take(f"host:{n}", 3):
                taken[n] += got
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [turn_id for got in taken for turn_id in got]
    assert sorted(every) == sorted(turns)


def test_a_wake_up_reaches_a_listener_at_the_commit_only(fault_agent):
    """On PostgreSQL a turn's start sends the runners' NOTIFY in its transaction: heard at the
    commit, never for a rollback."""
    from django.db import transaction

    from sessions_app.outbox.queue import enqueue_turn
    from sessions_app.workers.taker import NotifyWaiter

    if connection.vendor != "postgresql":
        pytest.skip("SQLite's runners watch data_version")
    waiter = NotifyWaiter()
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_turn("t")
            raise RuntimeError("rolled back")
        assert not waiter.listener.wait(0.2)
        with transaction.atomic():
            enqueue_turn("t")
            assert not waiter.listener.wait(0.2), "not before the commit"
        assert waiter.listener.wait(5)
    finally:
        waiter.close()


def test_a_start_wakes_the_runners_after_its_commit_from_another_connection(fault_agent):
    """On PostgreSQL a start sends no NOTIFY of its own, neither in its creation's transaction
    (PostgreSQL's notification lock would make a burst's creations commit one at a time) nor as
    a round trip after it: the process's waker sends it, after the commit. A start refused
    wakes nobody."""
    from django.test.utils import CaptureQueriesContext

    from sessions_app.workers.taker import NotifyWaiter

    if connection.vendor != "postgresql":
        pytest.skip("SQLite's runners watch data_version")
    waiter = NotifyWaiter()
    try:
        with CaptureQueriesContext(connection) as queries:
            turn_id = start("woken")
        assert not [q["sql"] for q in queries.captured_queries if "pg_notify" in q["sql"]]
        heard = list(waiter.listener.conn.notifies(timeout=2.0))
        assert [n.channel for n in heard] == ["june_turns"], heard
        assert heard[0].pid != connection.connection.info.backend_pid  # another connection's
        with pytest.raises(Exception):
            services.turn_start(agent=AGENT, key="woken", text="steps:1", source="http", turn_id=turn_id)
        assert not list(waiter.listener.conn.notifies(timeout=0.5)), "a refused start wakes nobody"
    finally:
        waiter.close()


def test_a_waker_sends_a_wake_up_after_every_ring_and_shares_them_in_a_burst(fault_agent):
    from sessions_app.outbox import queue

    if connection.vendor != "postgresql":
        pytest.skip("SQLite's runners watch data_version")
    waker = queue.Waker()
    for _ in range(200):
        waker.ring()
    wait_for(lambda: not waker._rung.is_set() and waker.sent >= 1, timeout=10, what="the burst's wake-up")
    sent = waker.sent
    assert 1 <= sent < 50, sent
    waker.ring()
    wait_for(lambda: waker.sent > sent, timeout=10, what="a later ring's own wake-up")


def test_sqlites_idle_look_is_data_version(fault_agent):
    """On SQLite a runner's look is ``PRAGMA data_version``: it moves with another connection's
    commit, not with the runner's own, and costs microseconds."""
    from sessions_app.workers.taker import VersionWaiter

    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's runners listen")
    waiter = VersionWaiter()
    before = waiter.version
    began = time.process_time()
    for _ in range(1000):
        waiter._read()
    per_look = (time.process_time() - began) / 1000
    assert per_look < 0.001
    done = threading.Event()

    def other() -> None:
        try:
            start("another connection")
        finally:
            connections.close_all()
            done.set()

    threading.Thread(target=other).start()
    assert done.wait(30)
    waiter.wait(2)
    assert waiter.version != before


# -- on real clusters -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_turn_queued_while_no_worker_runs_runs_when_one_starts(clusters, fault_agent):
    from tests.fault.test_kill import wait_final

    for cluster in clusters.started:
        if cluster.alive():
            cluster.kill()
    turns = [start(f"nobody-{n}") for n in range(3)]
    time.sleep(0.5)
    assert set(m.Turn.objects.filter(pk__in=turns).values_list("status", flat=True)) == {"queued"}
    clusters.start()
    assert [wait_final(turn_id, timeout=60) for turn_id in turns] == ["completed"] * 3
    assert all(m.Turn.objects.get(pk=turn_id).attempts == 1 for turn_id in turns)


@pytest.mark.slow
def test_a_turn_taken_by_a_killed_worker_runs_once_its_mark_runs_out(clusters, fault_agent):
    """A runner killed -9 after its take and before its claim leaves the take's mark (its
    ``host:pid``, a moment ahead): no runner takes the turn until the mark runs out, then one
    does, and the turn runs once."""
    import socket

    from agents_app.models import Order
    from tests.fault.test_kill import wait_final

    for cluster in clusters.started:
        if cluster.alive():
            cluster.kill()
    turn_id = start("killed taker", text="mugs")
    window = 3.0
    dead = f"taken:{socket.gethostname()}:{2**22 + os.getpid()}"  # a pid no process has
    m.Turn.objects.filter(pk=turn_id).update(lease_owner=dead, lease_expires_at=time.time() + window)
    marked = time.monotonic()
    clusters.start(JUNE_REQUEUE_AFTER=str(window))
    assert wait_final(turn_id, timeout=60) == "completed"
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.started_at is not None and turn.attempts == 1
    assert time.monotonic() - marked >= window - 0.5, "taken before its mark ran out"
    assert Order.objects.filter(turn_id=turn_id).count() == 1


def test_a_stopped_clusters_marks_are_handed_on_at_once(fault_agent):
    """``june_worker``'s stop expires the leases and the take marks of its dead workers."""
    import socket

    from sessions_app.workers.shutdown import release_leases

    turn_id = start("stopped")
    pid = 2**22 + os.getpid()
    m.Turn.objects.filter(pk=turn_id).update(
        lease_owner=f"taken:{socket.gethostname()}:{pid}", lease_expires_at=time.time() + 60
    )
    assert take("host:1", 10) == []
    assert release_leases([pid]) == 1
    wait_for(lambda: take("host:1", 10) == [turn_id], timeout=5, what="the mark to have run out")


def test_a_released_turn_is_held_for_its_runners_retry(fault_agent):
    """A retryable failure gives the lease back; no other runner takes the turn during the backoff
    (it would retry at once), its own runner's claim does, and after the hold any runner may."""
    from sessions_app import wiring
    from sessions_app.store import lease

    turn_id = start("retried")
    store = wiring.store()
    now = time.time()
    assert store.claim_sync(turn_id, owner="host:1", attempt_id="x1", now=now, lease_seconds=10)
    with connection.cursor() as cur:
        lease.release(turn_id, attempt_id="x1", cur=cur)
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == "queued" and turn.lease_owner == "taken:host:1"
    assert take("host:2", 10) == [], "held for host:1's retry"
    assert take("host:2", 10, now=time.time() + lease.RETRY_HOLD + 1) == [turn_id], "the hold runs out"


def test_the_admin_reads_a_take_mark_as_the_store_writes_it():
    from sessions_app.admin import timeline
    from sessions_app.store import lease

    assert timeline.TAKEN == lease.TAKEN
    text = timeline.lease_text(m.Turn(status="queued", lease_owner="taken:host:7", lease_expires_at=100.0), 95.0)
    assert "taken by the runner host:7" in text and "released" not in text
