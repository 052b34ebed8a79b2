"""The NOTIFY broker (sessions_app/workers/broker.py) on PostgreSQL: the notification rides with
the enqueuing commit, a waiting dequeue is woken by it, and a task whose notification was lost
(the listener down, or no NOTIFY at all) is still found by the poll — in this process and
through a real qcluster. Delivery is asserted, never timing: where a wake-up must have come from
the notification, the poll is set far longer than the test's deadline."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL's")


@pytest.fixture
def broker():
    from sessions_app.workers.broker import NotifyingORM

    b = NotifyingORM(list_key="test-broker")
    yield b
    b.close_listener()
    b.purge_queue()


@pytest.fixture
def listen():
    """A bare psycopg connection LISTENing on the test queue's channel."""
    from sessions_app.workers.broker import Listener, channel_for

    conn = Listener(channel_for("test-broker")).conn
    yield conn
    conn.close()


class Pusher:
    """``dequeue()`` in a loop on its own thread (and connection), as django-q2's pusher runs it."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.got: list[tuple[int, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.got.extend(self.broker.dequeue() or [])
        finally:
            self.broker.close_listener()
            connections.close_all()

    def listening(self) -> int:
        """The listener's backend pid, once it LISTENs."""
        return wait_for(
            lambda: self.broker._listener and self.broker._listener.backend_pid, timeout=10, what="the listener"
        )

    def close(self) -> None:
        self.stop.set()
        with connection.cursor() as cursor:  # end a long wait
            cursor.execute("SELECT pg_notify(%s, '')", [self.broker.channel])
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


@pytest.fixture
def pusher(broker):
    started = []

    def make() -> Pusher:
        started.append(Pusher(broker))
        return started[-1]

    yield make
    for p in started:
        p.close()


def terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


@postgresql
def test_the_notification_commits_with_the_row_and_not_with_a_rollback(broker, listen):
    """A NOTIFY sent outside the enqueuing transaction could wake a pusher before the row is
    visible, or for a row that was rolled back."""
    from django_q.models import OrmQ

    with pytest.raises(RuntimeError), transaction.atomic():
        broker.enqueue("rolled back")
        raise RuntimeError
    with transaction.atomic():
        pk = broker.enqueue("committed")
    notes = list(listen.notifies(timeout=10, stop_after=1)) + list(listen.notifies(timeout=0))
    assert [n.channel for n in notes] == [broker.channel]  # one: the rolled-back one never came
    assert list(OrmQ.objects.filter(key="test-broker").values_list("pk", "payload")) == [(pk, "committed")]
    broker.enqueue("autocommit")  # outside any transaction: its own, still with the row
    assert [n.channel for n in listen.notifies(timeout=10, stop_after=1)] == [broker.channel]
    assert OrmQ.objects.filter(key="test-broker", payload="autocommit").exists()


@postgresql
def test_a_waiting_dequeue_is_woken_by_the_notification(broker, pusher, monkeypatch):
    """The pusher slept out the whole poll interval before looking at the queue again."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "POLL", 120.0)  # the poll alone would not find it within the deadline
    p = pusher()
    p.listening()
    pk = broker.enqueue("wake")
    wait_for(lambda: p.got, timeout=20, what="the task")
    assert p.got == [(pk, "wake")]


@postgresql
def test_a_task_without_a_notification_is_found_by_the_poll(broker, pusher, monkeypatch):
    """A lost notification (or an enqueue by a broker that sends none) must not strand a task:
    the wait ends after the poll interval and the queue is looked at again."""
    from django.utils import timezone
    from django_q.conf import Conf
    from django_q.models import OrmQ

    monkeypatch.setattr(Conf, "POLL", 0.2)
    p = pusher()
    p.listening()
    row = OrmQ.objects.create(key="test-broker", payload="silent", lock=timezone.now())
    wait_for(lambda: p.got, timeout=20, what="the task")
    assert p.got == [(row.pk, "silent")]


@postgresql
def test_a_task_enqueued_while_the_listener_is_down_is_picked_up_and_the_listener_returns(broker, pusher, monkeypatch):
    """The listener's connection dies (a server restart, a terminated backend): its NOTIFY is
    lost. The pusher must poll meanwhile and reconnect the listener, not fail or stop."""
    from django_q.conf import Conf

    from sessions_app.workers import broker as broker_module

    monkeypatch.setattr(Conf, "POLL", 0.2)
    monkeypatch.setattr(broker_module, "RECONNECT_SECONDS", 30.0)  # still down at the enqueue
    p = pusher()
    first = p.listening()
    terminate(first)
    wait_for(lambda: broker._listener is None, timeout=20, what="the pusher to notice")
    pk = broker.enqueue("while down")  # nobody listens: the notification is lost
    wait_for(lambda: p.got, timeout=20, what="the task, by polling")
    assert p.got == [(pk, "while down")]
    broker._retry_at = 0.0  # the reconnect is due
    assert p.listening() != first
    monkeypatch.setattr(Conf, "POLL", 120.0)
    pk = broker.enqueue("after")
    wait_for(lambda: len(p.got) == 2, timeout=20, what="the task, by the new listener")
    assert p.got[1] == (pk, "after")


@postgresql
def test_the_pusher_survives_the_death_of_its_open_connection(broker, pusher, monkeypatch):
    """The pusher keeps its queue connection open; a server that drops it (a restart, an idle
    timeout) must cost one reconnect — django-q2's pusher dies on an exception from dequeue."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "POLL", 0.2)
    p = pusher()
    listener = p.listening()

    def pusher_connections() -> list[int]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid NOT IN (pg_backend_pid(), %s)",
                [listener],
            )
            return [pid for (pid,) in cursor.fetchall()]

    for pid in wait_for(pusher_connections, timeout=10, what="the pusher's connection"):
        terminate(pid)
    pk = broker.enqueue("after the drop")
    wait_for(lambda: p.got, timeout=20, what="the task")
    assert p.got == [(pk, "after the drop")] and p.thread.is_alive()


@postgresql
def test_the_monitor_acknowledges_on_its_open_connection(broker):
    """django-q2's acknowledge runs ``close_old_connections`` first: with ``CONN_MAX_AGE`` 0 the
    monitor connected to the database again for every finished task. A connection the server
    dropped must cost one reconnect, not the acknowledgement (the task would run again)."""
    from django_q.models import OrmQ

    def sessions_opened() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
            return cursor.fetchone()[0]

    ids = [broker.enqueue(f"task {n}") for n in range(20)]
    before = sessions_opened()
    for pk in ids[:10]:
        broker.acknowledge(pk)
    assert sessions_opened() == before  # pg_stat_database counts every connect
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        mine = cursor.fetchone()[0]
    terminate_from_another(mine)
    for pk in ids[10:]:
        broker.acknowledge(pk)
    assert not OrmQ.objects.filter(key="test-broker").exists()


@postgresql
def test_an_enqueue_keeps_the_callers_connection(fault_agent):
    """django-q2 makes a broker per async_task and its get_connection closed the caller's
    connection (CONN_MAX_AGE 0): a reconnect per turn queued by a request, and per hand-over
    in a worker — on the connection the store's units use."""
    from django.db import transaction

    from sessions_app.outbox.queue import enqueue_turn

    def sessions_opened() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
            return cursor.fetchone()[0]

    before = sessions_opened()
    for n in range(10):
        with transaction.atomic():
            enqueue_turn(f"t{n}")
        enqueue_turn(f"u{n}")  # autocommit: on_commit runs at once
    assert sessions_opened() == before


def terminate_from_another(pid: int) -> None:
    """Terminate a backend from a connection of its own (the one terminated is this thread's)."""
    import psycopg

    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(autocommit=True, **params) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        # the backend is gone before the test goes on
        for _ in range(100):
            if not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                break
            other.execute("SELECT pg_sleep(0.05)")


def test_elsewhere_it_is_the_orm_broker(broker, monkeypatch):
    """On SQLite (or any database without LISTEN) the broker must still queue and poll."""
    from django_q.conf import Conf

    monkeypatch.setattr(broker, "_on_postgresql", lambda: False)
    monkeypatch.setattr(Conf, "POLL", 0.01)
    pk = broker.enqueue("plain")
    assert broker.dequeue() == [(pk, "plain")]
    assert broker.dequeue() is None and broker._listener is None  # an empty queue: a poll's sleep


# -- through a real qcluster ----------------------------------------------------------------------


def start(agent: str, key: str) -> str:
    from sessions_app import services

    return services.turn_start(agent=agent, key=key, text="steps:0", source="http").turn_id


def completed(turn_id: str) -> bool:
    from sessions_app.models import Turn

    return Turn.objects.get(pk=turn_id).status == "completed"


def listeners(name: str = "june-q2-listener") -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s", [name]
        )
        return {pid for (pid,) in cursor.fetchall()}


@postgresql
def test_a_runner_is_woken_by_notify_and_still_takes_a_turn_whose_notify_was_lost(clusters, fault_agent, monkeypatch):
    """Workers must not depend on the notification: with a runner's listener's backend killed
    and a turn queued without any NOTIFY, the turn still runs (the poll finds it)."""
    from sessions_app.outbox import queue

    clusters.start(JUNE_Q_POLL="1")
    woken = start(fault_agent, "woken")
    wait_for(lambda: completed(woken), timeout=60, what="a turn woken by its NOTIFY")
    (pid,) = wait_for(lambda: listeners("june-turns-listener"), timeout=20, what="the runner's listener")
    terminate(pid)
    monkeypatch.setattr(queue, "wake", lambda: None)  # queued with no NOTIFY
    lost = start(fault_agent, "lost")
    wait_for(lambda: completed(lost), timeout=60, what="the turn whose notification was lost")
    wait_for(lambda: listeners("june-turns-listener") - {pid}, timeout=30, what="the listener to reconnect")


@postgresql
def test_the_claim_hands_each_task_out_once_oldest_first_and_locks_it_for_retry(broker):
    """The pusher's read and claim are one statement (``CLAIM_NEXT``): rows locked as they are
    read, so two clusters dequeuing at once never both take a row, and a taken row is locked
    for ``Conf.RETRY`` (handed out again only after that, as django-q2's claim has it)."""
    from django.utils import timezone
    from django_q.conf import Conf
    from django_q.models import OrmQ

    from sessions_app.workers.broker import NotifyingORM

    ids = [broker.enqueue(f"task {n}") for n in range(40)]
    got: list[list[int]] = [[], []]

    def pusher(n: int) -> None:
        other = NotifyingORM(list_key="test-broker")
        try:
            while claimed := other._claim_next():
                got[n].extend(pk for pk, _ in claimed)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got[0] + got[1]) == ids  # every task once
    assert got[0] == sorted(got[0]) and got[1] == sorted(got[1])  # each pusher took the oldest first
    soonest = min(OrmQ.objects.filter(key="test-broker").values_list("lock", flat=True))
    assert (soonest - timezone.now()).total_seconds() > Conf.RETRY - 60
    assert broker.dequeue() is None  # all locked: nothing to hand out


sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="the data_version gate is SQLite's")


@sqlite
def test_sqlite_an_idle_pusher_looks_at_the_queue_only_when_another_connection_commits(broker):
    """django-q2's ORM broker ran its look (and, with CONN_MAX_AGE 0, a reconnect) every
    ``Conf.POLL``, 20 times a second in an idle cluster. On SQLite the look waits for
    ``PRAGMA data_version`` to move (another connection committed) or for ``JUNE_Q_LISTEN_POLL``."""
    from django.db.backends.utils import CursorWrapper

    looks: list[str] = []
    original = CursorWrapper.execute

    def counting(self, sql, params=None):
        if "django_q_ormq" in sql and threading.current_thread() is pusher:
            looks.append(sql)
        return original(self, sql, params)

    got: list[tuple[int, str]] = []
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set():
                got.extend(broker.dequeue() or [])
        finally:
            connections.close_all()

    pusher = threading.Thread(target=run, daemon=True)
    CursorWrapper.execute = counting
    try:
        pusher.start()
        wait_for(lambda: looks, timeout=10, what="the first look")
        first = len(looks)
        stop.wait(0.5)  # 10 polls at JUNE_Q_POLL 0.05 (JUNE_Q_LISTEN_POLL is 1 s)
        assert len(looks) == first, f"an idle pusher looked {len(looks) - first} times without a commit"
        broker.enqueue("payload")  # this thread's connection commits: the pusher's data_version moves
        wait_for(lambda: got, timeout=5, what="the task, found at the next poll")
        assert [payload for _, payload in got] == ["payload"]
    finally:
        stop.set()
        pusher.join(10)
        CursorWrapper.execute = original


@postgresql
def test_an_idle_listener_waits_in_one_poll_and_a_notification_ends_it(monkeypatch):
    """psycopg's own wait for notifications wakes its thread every 0.1 s (to look for a Ctrl-C):
    an idle listener (a runner's taker, the pusher) woke ten times a second for nothing. The
    wait is one poll(2) for the whole timeout; a notification still ends it at once, and one
    that came before the wait is read without polling."""
    import select
    import time

    from sessions_app.workers import broker as broker_module
    from sessions_app.workers.broker import Listener, channel_for

    polls: list[float] = []
    real_poll = select.poll

    class Counting:
        def __init__(self) -> None:
            self.inner = real_poll()

        def register(self, *args):
            return self.inner.register(*args)

        def poll(self, timeout_ms):
            polls.append(timeout_ms)
            return self.inner.poll(timeout_ms)

    monkeypatch.setattr(broker_module.select, "poll", Counting)
    listener = Listener(channel_for("test-broker-idle"))
    try:
        began = time.monotonic()
        assert listener.wait(0.6) is False
        assert time.monotonic() - began >= 0.55
        assert polls == [600.0]  # one poll, the whole wait: not a wake-up per 0.1 s

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [channel_for("test-broker-idle")])
        time.sleep(0.2)  # it has arrived before the wait began
        polls.clear()
        assert listener.wait(30) is True and polls == []

        woken: list[bool] = []
        waiter = threading.Thread(target=lambda: woken.append(listener.wait(30)))
        began = time.monotonic()
        waiter.start()
        time.sleep(0.2)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [channel_for("test-broker-idle")])
        waiter.join(20)
        assert woken == [True] and time.monotonic() - began < 10
    finally:
        listener.close()


@postgresql
def test_a_listener_whose_backend_died_raises_and_does_not_spin():
    """A terminated backend makes the socket readable for good: the wait must raise psycopg's
    error (its callers reconnect), within a wait or two, not return at once forever."""
    import psycopg

    from sessions_app.workers.broker import Listener, channel_for

    listener = Listener(channel_for("test-broker-dead"))
    try:
        terminate(listener.backend_pid)
        with pytest.raises(psycopg.OperationalError):
            for _ in range(2):
                listener.wait(5)
    finally:
        listener.close()
