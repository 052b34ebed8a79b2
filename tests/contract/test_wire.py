"""sessions_app.store.wire: a checkpoint's statements in one libpq pipeline segment (PostgreSQL only;
the SQLite run skips this module, the PostgreSQL run of CI runs it)."""

from __future__ import annotations

import psycopg
import pytest

from tests.conftest import is_postgres

postgres_only = pytest.mark.skipif("not is_postgres()", reason="libpq pipelines: PostgreSQL only")


@pytest.fixture
def conn(transactional_db):
    from django.db import connections

    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    c = psycopg.connect(**params, autocommit=True)
    c.execute("CREATE TEMP TABLE wire_t (n integer PRIMARY KEY, v text)")
    yield c
    c.close()


def rows(conn) -> list[tuple]:
    return conn.execute("SELECT n, v FROM wire_t ORDER BY n").fetchall()


INSERT = b"INSERT INTO wire_t (n, v) VALUES ($1::integer, $2::text) RETURNING n * 10"


@postgres_only
@pytest.mark.parametrize("prepare", [True, False])
def test_a_batch_is_one_transaction_committed_at_its_end(conn, prepare):
    from sessions_app.store import wire

    batch = wire.Batch(conn, prepare=prepare)
    first = batch.add(INSERT, [1, "a"])
    batch.add(INSERT, [2, None])
    results = batch.run()
    assert wire.value(results[first], 0) == "10"
    assert rows(conn) == [(1, "a"), (2, None)]

    batch = wire.Batch(conn, prepare=prepare)
    batch.add(INSERT, [3, "kept only if all succeed"])
    batch.add(INSERT, [1, "duplicate key"])
    batch.add(INSERT, [4, "skipped after the failure"])
    with pytest.raises(psycopg.errors.UniqueViolation):
        batch.run()
    assert rows(conn) == [(1, "a"), (2, None)]  # all of it rolled back
    assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert conn.execute("SELECT 1").fetchone() == (1,)  # psycopg can use the connection again


@postgres_only
def test_a_deferred_batch_lands_first_and_its_failure_does_not_fail_the_next(conn):
    from sessions_app.store import wire

    deferred = wire.Batch(conn)
    deferred.add(INSERT, [1, "deferred"])
    deferred.defer()
    failing = wire.Batch(conn)
    failing.add(INSERT, [1, "refused: the deferred one landed first"])
    failing.defer()
    batch = wire.Batch(conn)
    batch.add(INSERT, [2, "next"])
    batch.run()
    assert rows(conn) == [(1, "deferred"), (2, "next")]
    wire.drain(conn)  # nothing left: a no-op
    assert conn.execute("SELECT count(*) FROM wire_t").fetchone() == (2,)


@postgres_only
def test_statements_are_prepared_again_after_deallocate_all(conn):
    from sessions_app.store import wire

    batch = wire.Batch(conn)
    batch.add(INSERT, [1, "a"])
    batch.run()
    conn.execute("DEALLOCATE ALL")  # e.g. a pooler resetting the session
    batch = wire.Batch(conn)
    batch.add(INSERT, [2, "b"])
    with pytest.raises(psycopg.errors.InvalidSqlStatementName):
        batch.run()
    batch = wire.Batch(conn)  # the next unit prepares it again
    batch.add(INSERT, [2, "b"])
    batch.run()
    assert rows(conn) == [(1, "a"), (2, "b")]


def test_numbered_placeholders():
    from sessions_app.store import wire

    assert wire.numbered("SELECT %s, %s::jsonb WHERE x = %s") == b"SELECT $1, $2::jsonb WHERE x = $3"
