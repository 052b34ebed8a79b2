"""A worker keeps the store's connections from task to task (sessions_app/workers/tasks.py) and
checks them before each: on PostgreSQL a connection that is idle with nothing to read is used
as it is (no ``SELECT 1`` and no thread hop per task); one the server ended — its error and
close make the socket readable — takes the store's full check, and the next turn still runs."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection, connections

from sessions_app.workers import tasks
from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="the quick check is PostgreSQL's")


def own_connection() -> psycopg.Connection:
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return psycopg.connect(autocommit=True, **params)


def terminate(pid: int) -> None:
    with own_connection() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@postgresql
def test_an_idle_connection_is_quiet_until_the_server_ends_it():
    conn = own_connection()
    try:
        assert tasks._quiet(conn)
        conn.execute("BEGIN")
        assert not tasks._quiet(conn)  # in a transaction: the full check decides
        conn.execute("ROLLBACK")
        assert tasks._quiet(conn)
        terminate(conn.info.backend_pid)
        wait_for(lambda: not tasks._quiet(conn), timeout=10, what="the terminated connection to be noticed")
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")  # what the turn's first statement would have met
    finally:
        conn.close()
    assert tasks._quiet(conn)  # closed: nothing left to check (the store opens a new one)
    assert tasks._quiet(None)


@postgresql
def test_a_worker_runs_the_next_turn_after_the_server_ended_its_connections(fault_agent):
    """The worker's Django connection (asgiref's sync thread: the sync tool's unit) and the
    store's own (the loop's thread) both terminated between two tasks: the check notices and
    the second turn completes in its first attempt, as the first did."""
    from bench.common import start
    from sessions_app import models as m
    from sessions_app.store import direct

    out: dict = {}

    def worker() -> None:
        try:
            tasks.keep_event_loop()
            first = start("conn-a", "steps:1")
            tasks.run_turn(first)
            django_pid = tasks._kept.django.connection.info.backend_pid
            direct_pid = direct.connection().info.backend_pid
            terminate(django_pid)
            terminate(direct_pid)
            wait_for(lambda: not tasks._quiet(direct.connection()), timeout=10, what="the loop's connection to end")
            wait_for(lambda: not tasks._quiet(tasks._kept.django.connection), timeout=10,
                     what="the sync thread's connection to end")
            second = start("conn-b", "steps:1")
            out["quiet"] = tasks._run(tasks._connections_quiet())
            tasks.run_turn(second)
            out["turns"] = [first, second]
        except BaseException as exc:  # re-raised in the test's thread
            out["error"] = exc
        finally:
            tasks._kept.__dict__.clear()
            direct.close_all()
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    assert out["quiet"] is False
    rows = dict(m.Turn.objects.filter(pk__in=out["turns"]).values_list("id", "attempts"))
    assert m.Turn.objects.filter(pk__in=out["turns"], status="completed").count() == 2
    assert set(rows.values()) == {1}
