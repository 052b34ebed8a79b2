"""sessions_app.store.wire: a checkpoint's statements in one libpq pipeline segment (PostgreSQL only;
the SQLite run skips this module, the PostgreSQL run of CI runs it)."""

from __future__ import annotations

import asyncio

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


@postgres_only
def test_a_connections_prepared_statements_run_their_generic_plan_from_the_first(conn):
    """The first preparation on a connection sets ``plan_cache_mode`` for it (a segment of its
    own, before the batch): no statement is planned anew for each of its first five executions;
    an unprepared batch leaves the connection as it was."""
    from sessions_app.store import wire

    batch = wire.Batch(conn, prepare=False)
    batch.add(INSERT, [1, "a"])
    batch.run()
    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
    select = b"SELECT v FROM wire_t WHERE n = $1::integer"
    batch = wire.Batch(conn)
    batch.add(INSERT, [2, "b"])
    found = batch.add(select, [1])
    assert wire.value(batch.run()[found], 0) == "a"
    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
    explained = conn.execute(f"EXPLAIN EXECUTE {wire._names[select].decode()} (2)").fetchall()
    assert any("$1" in line for (line,) in explained), explained  # a generic plan: its parameter, not 2
    assert rows(conn) == [(1, "a"), (2, "b")]


def test_numbered_placeholders():
    from sessions_app.store import wire

    assert wire.numbered("SELECT %s, %s::jsonb WHERE x = %s") == b"SELECT $1, $2::jsonb WHERE x = $3"


def test_a_batch_sends_each_parameter_as_param_makes_it():
    """A batch's parameters as ``param`` sends each, those it sends without calling it included."""
    import datetime
    import decimal
    import enum
    import uuid

    from sessions_app.store import wire

    class Kind(enum.StrEnum):
        A = "a"

    class Count(int):
        pass

    values = ["x", "é", "", 0, -5, 10**30, True, False, Count(3), None, 1.5, Kind.A, decimal.Decimal("1.20")]
    values += [datetime.datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC), uuid.uuid4()]
    batch = wire.Batch()
    batch.add(b"SELECT 1", values)
    assert batch.commands == [(b"SELECT 1", [wire.param(v) for v in values])]
    with pytest.raises(TypeError):
        batch.add(b"SELECT 1", [b"bytes"])


# -- pipes: the units of many turns on one connection, from the event loop ---------------------------


@pytest.fixture
def table(transactional_db):
    from django.db import connection as django

    with django.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS wire_p (n integer PRIMARY KEY, v text)")
    yield
    with django.cursor() as cur:
        cur.execute("DROP TABLE wire_p")


P_INSERT = b"INSERT INTO wire_p (n, v) VALUES ($1::integer, $2::text) RETURNING n * 10"


def p_batch(n: int, v: str | None = "x"):
    from sessions_app.store import wire

    batch = wire.Batch()
    batch.add(P_INSERT, [n, v])
    return batch


def p_rows() -> list[tuple]:
    from django.db import connection as django

    with django.cursor() as cur:
        cur.execute("SELECT n, v FROM wire_p ORDER BY n")
        return cur.fetchall()


@postgres_only
async def test_many_units_in_flight_on_one_pipe_each_get_their_own_results(table):
    """Units of many turns share one connection at once: each is its own transaction, gets its
    own results, and a failing one rolls back alone while the ones sent after it commit."""
    from asgiref.sync import sync_to_async

    from sessions_app.store import wire
    from sessions_app.store.pipes import Pipes

    pipes = Pipes(1)
    try:
        pipe = await pipes.for_turn("t")

        async def unit(n: int) -> str:
            if n == 13:  # a duplicate of 12: refused, alone
                batch = wire.Batch()
                batch.add(P_INSERT, [1000 + n, "rolled back with the failure"])
                batch.add(P_INSERT, [12, "duplicate"])
                with pytest.raises(psycopg.errors.UniqueViolation):
                    await pipe.run(batch)
                return "refused"
            results = await pipe.run(p_batch(n))
            return wire.value(results[0], 0)

        answers = await asyncio.gather(*(unit(n) for n in range(200)))
        assert answers[13] == "refused"
        assert [a for i, a in enumerate(answers) if i != 13] == [str(n * 10) for n in range(200) if n != 13]
        assert len(pipe.sent) == 0 and pipe.usable
        rows = await sync_to_async(p_rows)()
        assert [n for n, _ in rows] == [n for n in range(200) if n != 13]
    finally:
        pipes.close()


@postgres_only
async def test_a_deferred_unit_lands_before_the_next_unit_of_its_turn(table):
    from asgiref.sync import sync_to_async

    from sessions_app.store.pipes import Pipes

    pipes = Pipes(3)
    try:
        pipe = await pipes.for_turn("turn-a")
        assert await pipes.for_turn("turn-a") is pipe  # a turn always takes the same pipe
        pipe.defer(p_batch(1, "deferred"))
        with pytest.raises(psycopg.errors.UniqueViolation):
            await pipe.run(p_batch(1, "refused: the deferred one landed first"))
        pipe.defer(p_batch(1, "a deferred refusal is only logged"))
        await pipe.run(p_batch(2, "next"))
        assert await sync_to_async(p_rows)() == [(1, "deferred"), (2, "next")]
    finally:
        pipes.close()


@postgres_only
async def test_a_broken_pipe_fails_its_units_and_the_next_unit_opens_it_again(table):
    """The server ends the connection (a restart, a terminated backend): the units in flight
    fail with an OperationalError, and the turn's next unit runs on a new connection."""
    from asgiref.sync import sync_to_async
    from django.db import connection as django

    from sessions_app.store.pipes import Pipes

    pipes = Pipes(1)
    try:
        pipe = await pipes.for_turn("t")
        await pipe.run(p_batch(1))
        pid = pipe.conn.info.backend_pid

        def terminate() -> None:
            with django.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(%s)", [pid])

        sleeping = wire_sleep(pipe)
        await asyncio.sleep(0.05)
        await sync_to_async(terminate)()
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(sleeping, 10)
        assert not pipe.usable
        with pytest.raises(psycopg.OperationalError):
            await pipe.run(p_batch(2))
        again = await pipes.for_turn("t")
        assert again is not pipe and again.conn.info.backend_pid != pid
        await again.run(p_batch(2))
        assert [n for n, _ in await sync_to_async(p_rows)()] == [1, 2]
    finally:
        pipes.close()


def wire_sleep(pipe):
    from sessions_app.store import wire

    batch = wire.Batch(prepare=False)
    batch.add(b"SELECT pg_sleep(5)")
    return asyncio.ensure_future(pipe.run(batch))


@postgres_only
async def test_a_pipe_prepares_again_after_deallocate_all(table):
    from sessions_app.store import wire
    from sessions_app.store.pipes import Pipes

    pipes = Pipes(1)
    try:
        pipe = await pipes.for_turn("t")
        await pipe.run(p_batch(1))
        deallocate = wire.Batch(prepare=False)
        deallocate.add(b"DEALLOCATE ALL")
        await pipe.run(deallocate)
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            await pipe.run(p_batch(2))
        await pipe.run(p_batch(2))  # prepared again
        assert pipe.usable
    finally:
        pipes.close()


class CountingPg:
    """A pipe's libpq handle, its writes (``flush``) counted."""

    def __init__(self, pg) -> None:
        self._pg = pg
        self.flushes = 0

    def flush(self) -> int:
        self.flushes += 1
        return self._pg.flush()

    def __getattr__(self, name: str):
        return getattr(self._pg, name)


@postgres_only
async def test_the_units_queued_in_one_pass_of_the_loop_go_out_in_one_write(table):
    """Every unit of a pass of the loop (many turns' checkpoints) is written to the server at
    once at the end of the pass, not one send per unit; each still gets its own results."""
    from asgiref.sync import sync_to_async

    from sessions_app.store import wire
    from sessions_app.store.pipes import Pipes

    if wire.queue_sync() is None:
        pytest.skip("this libpq cannot queue a Sync without writing (PQsendPipelineSync: libpq 17)")
    pipes = Pipes(1)
    try:
        pipe = await pipes.for_turn("t")
        await pipe.run(p_batch(0))  # the connection's preparations, out of the way
        counting = pipe.pg = CountingPg(pipe.pg)
        answers = await asyncio.gather(*(pipe.run(p_batch(n)) for n in range(1, 21)))
        assert [wire.value(r[0], 0) for r in answers] == [str(n * 10) for n in range(1, 21)]
        assert counting.flushes == 1
        assert len(await sync_to_async(p_rows)()) == 21
    finally:
        pipes.close()


@postgres_only
async def test_open_all_opens_every_pipe_and_a_database_down_fails_nothing(table):
    """A runner's start opens all its pipes (``open_all``), so its first turns find them open;
    with the database down none is opened, nothing is raised, and the first unit that needs a
    pipe opens it."""
    from sessions_app.store.pipes import Pipes, connection_params

    connects: list[str] = []
    down = True

    def params():
        connects.append("down" if down else "up")
        return {**connection_params(), "host": "127.0.0.1", "port": 1} if down else connection_params()

    pipes = Pipes(3, params)
    try:
        assert await pipes.open_all() == 0 and connects == ["down"] * 3 and pipes.in_use() == 0
        down = False
        pipe = await pipes.for_turn("t")  # the first unit's pipe, opened now
        await pipe.run(p_batch(1))
        assert connects == ["down"] * 3 + ["up"] and pipes.in_use() == 1
        assert await pipes.open_all() == 3 and connects.count("up") == 3  # the other two
        before = list(connects)
        for n in range(20):  # every turn finds its pipe open: no connect
            assert (await pipes.for_turn(f"turn-{n}")).usable
        assert connects == before and await pipes.open_all() == 3 and connects == before
    finally:
        pipes.close()
