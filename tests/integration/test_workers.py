"""The worker path: django-q2 settings, the sweeper (in-process and its schedule), a turn queued
by its row alone, 50 turns on a real two-worker qcluster, and a live cancel reaching a running
worker."""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def start(agent: str, key: str, text: str = "mugs") -> str:
    from sessions_app import services

    return services.turn_start(agent=agent, key=key, text=text, source="http").turn_id


def test_q_cluster_settings_give_at_least_once_delivery():
    q = settings.Q_CLUSTER
    assert q["orm"] == "default"  # the ORM broker keeps a task until it is acknowledged
    assert q["timeout"] < q["retry"]  # a running task is never handed out twice
    assert 0 < q["max_attempts"] <= 10
    assert q["poll"] <= 0.1  # an idle cluster looks at the queue at least every 100 ms
    assert settings.JUNE_LEASE_SECONDS <= 10 and 0 < settings.JUNE_SWEEP_SECONDS < settings.JUNE_LEASE_SECONDS


def test_the_queue_is_june_s_broker_on_postgresql_and_sqlite():
    from django.db import connection

    assert connection.vendor in ("postgresql", "sqlite")
    assert settings.Q_CLUSTER.get("broker_class") == "sessions_app.workers.broker.NotifyingORM"


def test_a_worker_freezes_its_start_up_heap():
    """Generation-2 collections in a worker walked the whole start-up heap (Django, the apps)
    in the middle of turns; its young generations were collected every 700 allocations, each
    collection walking the live turns' objects to find almost nothing."""
    import gc

    from django_q.signals import post_spawn

    from sessions_app.apps import WORKER_GC_THRESHOLD, _freeze_heap

    assert _freeze_heap in post_spawn._live_receivers("django_q")[0]  # run at every worker's start
    threshold = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # Python's (a worker run in this process may have set its own)
        _freeze_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == WORKER_GC_THRESHOLD and WORKER_GC_THRESHOLD[0] > 700
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_sweeper_schedule_is_created_and_a_tick_fires_once():
    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.models import OrmQ, Schedule
    from django_q.scheduler import scheduler
    from django_q.signing import SignedPackage

    from sessions_app.workers.tasks import SWEEP, SWEEP_SCHEDULE

    schedule = Schedule.objects.get(name=SWEEP_SCHEDULE)  # created by migrate (post_migrate)
    assert schedule.func == SWEEP and schedule.schedule_type == Schedule.MINUTES and schedule.repeats < 0
    Schedule.objects.filter(pk=schedule.pk).update(next_run=timezone.now() - timezone.timedelta(seconds=5))
    broker = get_broker()
    scheduler(broker=broker)
    scheduler(broker=broker)  # a second scheduler pass (another cluster) finds nothing due
    funcs = [SignedPackage.loads(p)["func"] for p in OrmQ.objects.values_list("payload", flat=True)]
    assert funcs.count(SWEEP) == 1
    assert Schedule.objects.get(pk=schedule.pk).next_run > timezone.now()


def test_sweeper_redelivers_an_expired_lease_once_and_fails_a_spent_budget(fault_agent):
    from agents_app.runtime.seams import SessionRef, TurnInput
    from sessions_app import wiring
    from sessions_app.models import Event, Turn
    from sessions_app.workers.sweeper import sweep_expired
    from sessions_app.workers.taker import take

    def takes(now: float) -> list[str]:
        """What a runner would take now (the mark undone: each look is a fresh runner's)."""
        taken = take("host:1", 10, now=now, window=0)
        for turn_id in taken:
            Turn.objects.filter(pk=turn_id, lease_owner="taken:host:1").update(lease_owner=None)
        return taken

    store = wiring.store()
    ref = SessionRef(fault_agent, "sweep")
    first = store.create_turn_sync(ref, TurnInput(text="a"), turn_id="t1").turn_id
    second = store.create_turn_sync(ref, TurnInput(text="b"), turn_id="t2").turn_id
    now = time.time()
    assert store.claim_sync(first, owner="dead:1", attempt_id="a1", now=now - 100, lease_seconds=1)
    assert takes(now) == [], "running on an expired lease the sweeper has not looked at"
    assert sweep_expired(now=now) == {"redelivered": 1, "failed": 0}
    assert sweep_expired(now=now) == {"redelivered": 0, "failed": 0}  # another sweeper: nothing
    assert Turn.objects.get(pk=first).lease_owner == "swept:dead:1"
    assert takes(now + 0.1) == [first], "re-delivered: a runner takes it; the second waits for the chain"
    Turn.objects.filter(pk=first).update(lease_owner="swept:dead:1", lease_expires_at=now)
    # not claimed within redeliver_after: re-delivered again
    assert sweep_expired(now=now + 1, redeliver_after=0.5)["redelivered"] == 1
    # the budget is spent: the turn fails with a reason and the chain moves to the next turn
    Turn.objects.filter(pk=first).update(attempts=settings.JUNE_MAX_ATTEMPTS)
    assert sweep_expired(now=now + 100, redeliver_after=0)["failed"] == 1
    turn = Turn.objects.get(pk=first)
    assert turn.status == "failed" and turn.error["reason"] == "budget_exhausted" and turn.phase == "committed"
    assert "retry budget exhausted" in Event.objects.get(turn_id=first, type="turn.failed").data["error"]
    assert takes(time.time()) == [second]


def test_the_watchdog_keeps_its_connection_between_passes(monkeypatch):
    """Every worker's watchdog reconnected to the database at every pass (close_old_connections
    with CONN_MAX_AGE 0): a connect per second per worker process, idle or not."""
    import threading

    from django.db import connection

    from sessions_app.workers import watchdog

    if connection.vendor != "postgresql":
        pytest.skip("pg_stat_database counts the connects")

    class Enough(BaseException):
        pass

    passes = []

    def sleep(seconds: float) -> None:
        passes.append(seconds)
        if len(passes) > 6:
            raise Enough

    def sessions_opened() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
            return cursor.fetchone()[0]

    monkeypatch.setattr(watchdog.time, "sleep", sleep)
    before = sessions_opened()

    def watch() -> None:
        try:
            watchdog._watch(0.01)
        except Enough:
            pass
        finally:
            from django.db import connections

            connections.close_all()

    thread = threading.Thread(target=watch)
    thread.start()
    thread.join(30)
    assert len(passes) == 7 and sessions_opened() - before == 1  # the thread's one connect


def test_fifty_turns_ten_sessions_two_workers(clusters, fault_agent):
    from sessions_app.models import Message, Turn

    clusters.start(JUNE_Q_WORKERS="2")
    started = time.monotonic()
    turns = {f"s{s}": [start(fault_agent, f"s{s}", text=f"order {n}") for n in range(5)] for s in range(10)}
    ids = [t for chain in turns.values() for t in chain]
    wait_for(
        lambda: Turn.objects.filter(pk__in=ids, status="completed").count() == len(ids),
        timeout=240,
        interval=0.2,
        what="50 turns to complete",
    )
    elapsed = time.monotonic() - started
    for key, chain in turns.items():
        openings = [Message.objects.get(turn_id=t, role="user").index for t in chain]
        assert openings == sorted(openings) and len(set(openings)) == 5, (key, openings)
        indices = list(Message.objects.filter(session__key=key).order_by("index").values_list("index", flat=True))
        assert indices == list(range(25)), key  # 5 turns x 5 messages, no gap, no duplicate
    assert Turn.objects.filter(pk__in=ids, attempts=1).count() == len(ids)
    from django_q.models import OrmQ, Task

    from sessions_app.outbox.queue import RUN_TURN

    wait_for(lambda: not OrmQ.objects.exists(), timeout=30, what="every task acknowledged")
    assert not Task.objects.filter(func=RUN_TURN).exists()  # no result row per turn task
    print(f"50 turns on 2 workers: {elapsed:.1f}s ({len(ids) / elapsed:.1f} turns/s)")


def test_a_turn_is_queued_by_its_row_alone(fault_agent):
    """No django-q2 task per turn: a started turn is its queued row, which a runner takes."""
    from django_q.models import OrmQ

    from sessions_app.workers.taker import take

    turn_id = start(fault_agent, "no task")
    assert not OrmQ.objects.exists()
    assert take("host:1", 10) == [turn_id]


def test_live_cancel_reaches_a_running_worker(clusters, fault_agent):
    """The lease is long here (a heartbeat every 40 s) and the model streams for 20 s: a cancel
    that stops the stream within a few deltas can only have come through the live signal."""
    if "InMemory" in settings.CHANNEL_LAYERS["default"]["BACKEND"]:
        pytest.skip("the in-memory channel layer does not cross processes")
    from sessions_app import services
    from sessions_app.models import Message, Turn

    clusters.start(JUNE_LEASE_SECONDS="120")
    turn_id = start(fault_agent, "cancel", text="slow:80")
    wait_for(lambda: clusters.count("delta", turn_id) >= 2, what="the stream to start")
    asked = time.monotonic()
    services.turn_cancel(turn_id=turn_id)
    wait_for(lambda: Turn.objects.get(pk=turn_id).status == "cancelled", timeout=60, what="the cancel")
    took = time.monotonic() - asked
    deltas = clusters.count("delta", turn_id)
    assert deltas < 40, f"the stream ran on for {deltas} deltas: the cancel came by heartbeat, not live"
    assert not Message.objects.filter(turn_id=turn_id, role="assistant").exists()
    assert Turn.objects.get(pk=turn_id).cancel_reason == "requested"
    print(f"live cancel: cancelled {took * 1000:.0f} ms after the request ({deltas} deltas streamed)")


def test_the_sweep_reads_the_longest_expired_leases_first(fault_agent):
    """Past its limit, the sweep takes the turns whose leases ran out first (not the turns of the
    sessions that sort first), and none whose lease is alive or that is not running."""
    from agents_app.runtime.seams import SessionRef, TurnInput
    from sessions_app import wiring
    from sessions_app.workers.sweeper import expired

    store = wiring.store()
    now = time.time()
    for name, ago in (("a", 5), ("b", 50), ("c", -30), ("d", 20)):
        turn = store.create_turn_sync(SessionRef(fault_agent, name), TurnInput(text=name), turn_id=f"t{name}")
        assert store.claim_sync(turn.turn_id, owner=f"dead:{name}", attempt_id=name, now=now - ago - 1, lease_seconds=1)
    store.create_turn_sync(SessionRef(fault_agent, "e"), TurnInput(text="e"), turn_id="te")  # queued
    assert [row[0] for row in expired(now, limit=2)] == ["tb", "td"]
    assert [(row[0], row[1], row[2]) for row in expired(now)] == [
        ("tb", "b", "dead:b"),
        ("td", "d", "dead:d"),
        ("ta", "a", "dead:a"),
    ]
