"""SQLite: the store's own connection (``sessions_app.store.lite``). Units and reads that run
no tool code stay on the caller's thread; a write lock held by another connection sends them to
the thread path without stalling the event loop; a sync caller's open transaction is seen;
connections do not outlive their database file."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from agents_app.runtime import Message, Phase, Role, SessionRef, TurnInput, TurnStatus
from agents_app.runtime import events as ev
from sessions_app import models as m
from sessions_app.store import DjangoSessionStore, host_ops, lite, lite_conn, lite_wal
from tests.conftest import is_postgres
from tests.contract.units import NullSink

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("is_postgres()", reason="the store's own SQLite connection: SQLite only"),
]

REF = SessionRef("ops", "lite")


def tid() -> str:
    return uuid.uuid4().hex


def _opening(turn_id: str, seen: list[int] | None = None):
    def work(tx):
        if seen is not None:
            seen.append(threading.get_ident())
        tx.append(Message(Role.USER, text="hi", turn_id=turn_id), 0)
        tx.emit(ev.TurnStarted(turn_id, text="hi"))
        tx.journal(Phase.BEFORE_PROVIDER)
        tx.settle(TurnStatus.RUNNING)

    return work


def _database() -> str:
    from django.db import connections

    return str(connections["default"].settings_dict["NAME"])


async def test_creation_record_only_units_reads_and_the_lease_run_on_the_calling_thread(monkeypatch):
    def no_hop(*args, **kwargs):
        raise AssertionError("a thread hop")

    monkeypatch.setattr("sessions_app.store.sync_to_async", no_hop)
    store = DjangoSessionStore()
    first, second = tid(), tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=first)
    await store.create_turn(REF, TurnInput(text="2"), turn_id=second)
    me = threading.get_ident()
    assert await store.next_queued(REF) == first
    attempt = tid()
    rec = await store.claim(first, owner="w", attempt_id=attempt, now=100.0, lease_seconds=10)
    assert rec is not None and rec.status == TurnStatus.RUNNING and rec.attempts == 1 and rec.lease_owner == "w"
    assert await store.heartbeat(first, attempt_id=attempt, now=105.0, lease_seconds=10) is None
    seen: list[int] = []
    commit = await store.commit(first, attempt, _opening(first, seen))
    assert seen == [me]
    assert [(e.seq, e.event.type) for e in commit.events] == [(1, "turn.started")]
    await store.journal(first, attempt, Phase.PROVIDER_STARTED, stream_key="k")
    state = await store.load(first)
    assert [msg.text for msg in state.transcript] == ["hi"]
    assert state.turn.phase == Phase.PROVIDER_STARTED and state.turn.journal["stream_key"] == "k"
    assert (await store.get_turn(first)).lease_expires == 115.0
    await store.release(first, attempt_id=attempt)
    assert (await store.get_turn(first)).status == TurnStatus.QUEUED
    monkeypatch.undo()
    session = await sync_to_async(m.Session.objects.get)(key="lite")
    assert session.status == "running" and session.event_seq == 1


async def test_a_locked_database_does_not_stall_the_loop():
    """Another connection holds the write lock for 0.3 s: the units wait off the loop (the
    thread path) and commit once it is free; the loop runs other coroutines meanwhile."""
    store = DjangoSessionStore()
    turn_id, other = tid(), tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=turn_id)
    await store.create_turn(SessionRef("ops", "lite-2"), TurnInput(text="2"), turn_id=other)
    attempt = tid()
    assert await store.claim(turn_id, owner="w", attempt_id=attempt, now=100.0, lease_seconds=10) is not None

    holder = sqlite3.connect(_database(), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    ticks: list[float] = []
    held = asyncio.Event()

    async def ticker() -> None:
        while not held.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    async def release_later() -> None:
        await asyncio.sleep(0.3)
        held.set()
        holder.execute("ROLLBACK")

    began = time.monotonic()
    beat = asyncio.create_task(ticker())
    freed = asyncio.create_task(release_later())
    third = tid()
    commit, claimed, _, created = await asyncio.gather(
        store.commit(turn_id, attempt, _opening(turn_id)),
        store.claim(other, owner="w", attempt_id=tid(), now=100.0, lease_seconds=10),
        store.heartbeat(turn_id, attempt_id=attempt, now=101.0, lease_seconds=10),
        store.create_turn(SessionRef("ops", "lite-3"), TurnInput(text="3"), turn_id=third),
    )
    done = time.monotonic()
    await freed
    await beat
    holder.close()
    assert done - began >= 0.29  # they waited for the lock...
    # ...off the loop: a unit that waited on it would hold it the lock's 0.3 s; a busy machine
    # may pause the process a scheduler's slice or two (a 0.1 s bound failed at load 8)
    assert len(ticks) >= 20 and max(b - a for a, b in zip(ticks, ticks[1:])) < 0.2
    assert [e.event.type for e in commit.events] == ["turn.started"]
    assert claimed is not None and claimed.status == TurnStatus.RUNNING
    assert created.turn.turn_id == third and (await store.get_turn(third)).status == TurnStatus.QUEUED
    assert [msg.text for msg in (await store.load(turn_id)).transcript] == ["hi"]
    assert (await store.get_turn(turn_id)).lease_expires == 111.0


def _locked_elsewhere() -> bool:
    """Whether a connection holds the database's write lock (a ``BEGIN IMMEDIATE`` that does
    not wait is refused)."""
    other = sqlite3.connect(_database(), timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return True
    finally:
        other.close()


async def _claimed_turn(store: DjangoSessionStore, key: str) -> tuple[str, str]:
    turn_id, attempt = tid(), tid()
    await store.create_turn(SessionRef("ops", key), TurnInput(text="hi"), turn_id=turn_id)
    assert await store.claim_and_load(turn_id, owner="w", attempt_id=attempt, now=time.time(), lease_seconds=60)
    return turn_id, attempt


async def test_a_sync_tool_that_sends_no_sql_holds_no_write_lock_and_the_heartbeat_goes_on():
    """The sync tool's unit takes SQLite's write lock only at the tool's first statement: one
    that sends none (an HTTP call, a computation) leaves the database to every other writer
    while it runs, its own turn's heartbeat among them (on the loop's thread and the store's
    connection, while the tool holds asgiref's thread). Its step commits after it, as a plain
    unit (``toolsql``)."""
    store = DjangoSessionStore()
    turn_id, attempt = await _claimed_turn(store, "no-sql")
    loop_thread = threading.get_ident()
    beat_done = threading.Event()
    seen: list[tuple[bool, bool]] = []

    def tool(tx):
        seen.append((threading.get_ident() != loop_thread, _locked_elsewhere()))
        assert beat_done.wait(10), "the heartbeat waited for the tool"
        _opening(turn_id)(tx)

    unit = asyncio.create_task(store.atomic(turn_id, attempt, tool))
    while not seen:
        await asyncio.sleep(0.001)
    reason = await asyncio.wait_for(store.heartbeat(turn_id, attempt_id=attempt, now=time.time(), lease_seconds=90), 5)
    beat_done.set()
    commit = await unit
    assert seen == [(True, False)] and reason is None
    assert [e.event.type for e in commit.events] == ["turn.started"]
    assert [msg.text for msg in (await store.load(turn_id)).transcript] == ["hi"]


async def test_a_heartbeat_that_meets_another_writer_waits_for_it_not_for_the_sync_tool():
    """While a sync tool runs (holding the thread that owns Django's connection), its turn's
    heartbeat meets another writer's lock: it tries again on the loop until the lock is free,
    rather than wait on that thread for the tool to end (a tool past the lease would lose it)."""
    store = DjangoSessionStore()
    turn_id, attempt = await _claimed_turn(store, "busy-beat")
    started, release = threading.Event(), threading.Event()

    def tool(tx):
        started.set()
        assert release.wait(10), "the test never let the tool finish"
        _opening(turn_id)(tx)

    unit = asyncio.create_task(store.atomic(turn_id, attempt, tool))
    while not started.is_set():
        await asyncio.sleep(0.001)
    holder = sqlite3.connect(_database(), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer, for 0.2 s
    asyncio.get_running_loop().call_later(0.2, holder.execute, "ROLLBACK")
    began = time.monotonic()
    try:
        reason = await asyncio.wait_for(store.heartbeat(turn_id, attempt_id=attempt, now=1000.0, lease_seconds=60), 5)
        waited = time.monotonic() - began
    finally:
        release.set()
        await unit
        holder.close()
    assert reason is None and 0.15 < waited < 2
    assert (await store.get_turn(turn_id)).lease_expires == 1060.0


async def test_a_sync_tool_holds_the_write_lock_from_its_first_statement_to_its_steps_commit():
    """A tool that uses the ORM reads and writes in the checkpoint's transaction, under the
    write lock from its first statement on: another connection's commit before that statement
    does not make its read-then-write fail (a deferred transaction's stale snapshot would:
    ``SQLITE_BUSY_SNAPSHOT``), and none commits between its statements."""
    from agents_app.models import Order

    store = DjangoSessionStore()
    turn_id, attempt = await _claimed_turn(store, "orm-tool")
    seen: list[bool] = []

    def tool(tx):
        other = sqlite3.connect(_database(), timeout=5, isolation_level=None)
        other.execute("UPDATE sessions_app_session SET title = 'moved' WHERE key = 'orm-tool'")
        other.close()
        seen.append(_locked_elsewhere())  # the unit has begun; the tool sent nothing yet
        session = m.Session.objects.get(key="orm-tool")  # a read...
        seen.append(_locked_elsewhere())
        Order.objects.create(item=f"for {session.title}")  # ...then a write
        _opening(turn_id)(tx)

    commit = await store.atomic(turn_id, attempt, tool)
    assert seen == [False, True]
    assert [e.event.type for e in commit.events] == ["turn.started"]
    assert await sync_to_async(lambda: list(Order.objects.values_list("item", flat=True)))() == ["for moved"]


async def test_a_lock_the_tools_first_statement_could_not_take_fails_the_unit_not_the_tool():
    """The busy timeout runs out before the tool's first statement gets the write lock: the
    unit raises the database's error (the attempt's, retried as any), even when the tool
    swallowed it, and nothing of the step is written."""
    from django.db import OperationalError, connection

    store = DjangoSessionStore()
    turn_id, attempt = await _claimed_turn(store, "refused")

    def short_timeout() -> None:
        connection.ensure_connection()
        connection.connection.execute("PRAGMA busy_timeout = 50")

    await sync_to_async(short_timeout)()
    holder = sqlite3.connect(_database(), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")

    def tool(tx):
        try:
            m.Session.objects.count()
        except Exception:  # a tool that carries on whatever happens
            pass
        _opening(turn_id)(tx)

    try:
        with pytest.raises(OperationalError, match="locked"):
            await store.atomic(turn_id, attempt, tool)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await sync_to_async(lambda: connection.close())()  # its next use opens it with the settings' timeout
    assert (await store.load(turn_id)).transcript == []


def test_a_sync_callers_open_transaction_is_seen():
    """Through ``async_to_sync`` the calls go to the caller's thread and connection, as before:
    a turn created in its open transaction is there."""
    from django.db import transaction

    store = DjangoSessionStore()
    turn_id = tid()
    with transaction.atomic():
        host_ops.create_turn(REF, TurnInput(text="uncommitted"), turn_id=turn_id)
        assert async_to_sync(store.get_turn)(turn_id).input.text == "uncommitted"
        assert async_to_sync(store.next_queued)(REF) == turn_id


async def test_connections_do_not_outlive_their_file():
    store = DjangoSessionStore()
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=turn_id)
    await store.get_turn(turn_id)
    first = lite_conn._local.own.conn
    lite.drop_unusable()  # the same file: kept
    assert lite_conn._local.own.conn is first
    lite_conn._local.own.inode += 1  # as if the file had been deleted and created again
    await store.drop_broken_connections()
    with pytest.raises(sqlite3.ProgrammingError):
        first.execute("SELECT 1")
    assert (await store.get_turn(turn_id)).input.text == "1"  # a new connection
    second = lite_conn._local.own.conn
    assert second is not first
    lite.close_all()
    with pytest.raises(sqlite3.ProgrammingError):
        second.execute("SELECT 1")
    assert (await store.get_turn(turn_id)).input.text == "1"


def _wal_restarts() -> int:
    """How many times the WAL started over (its header's checkpoint sequence number)."""
    with open(_database() + "-wal", "rb") as wal:
        return int.from_bytes(wal.read(16)[12:16], "big")


async def test_the_wal_is_checkpointed_off_the_units(monkeypatch):
    """A thread of the process copies the WAL's pages to the database (off the units, which
    SQLite's automatic checkpoint would make wait once the WAL passes 1,000 pages), and the WAL
    starts over without it: here after a few dozen one-page units."""
    monkeypatch.setattr(lite_wal, "CHECKPOINT_EVERY", 8)
    threads = []
    checkpoint_wal = lite_wal.checkpoint_wal

    def recorded(path, init_command):
        threads.append(threading.get_ident())
        return checkpoint_wal(path, init_command)

    monkeypatch.setattr(lite_wal, "checkpoint_wal", recorded)
    store = DjangoSessionStore()
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=turn_id)
    with sqlite3.connect(_database()) as conn:  # the WAL empty, at its start
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # a checkpoint runs
            time.sleep(0.01)
    time.sleep(0.05)  # one that ran then hands its connection over
    lite_wal.checkpoints.forget()  # for the rest, which is nothing now
    await store.journal(turn_id, None, Phase.BEFORE_PROVIDER)  # the WAL's header
    restarts = _wal_restarts()
    for n in range(400):  # one page each; SQLite would start the WAL over after 1,000
        await store.journal(turn_id, None, Phase.BEFORE_PROVIDER, n=n)
        if _wal_restarts() != restarts:
            break
        time.sleep(0.001)  # the thread's turn
    assert _wal_restarts() != restarts, "the WAL never started over"
    assert threads and threading.get_ident() not in threads


async def test_the_checkpoints_keep_their_connection(monkeypatch):
    """The checkpoints' thread opens its connection to a file once and keeps it for the next
    checkpoint: a connection's first statement reads the whole schema (2M instructions here),
    which every checkpoint paid when each opened its own. ``forget`` (``close_all``) closes it."""
    monkeypatch.setattr(lite_wal, "CHECKPOINT_EVERY", 4)
    opened: list[sqlite3.Connection] = []
    passes: list[sqlite3.Connection] = []
    checkpoint_wal, checkpoint_passes = lite_wal.checkpoint_wal, lite_wal.checkpoint_passes

    def opening(path, init_command):
        conn, busy = checkpoint_wal(path, init_command)
        opened.append(conn)
        return conn, busy

    def passing(conn):
        passes.append(conn)
        return checkpoint_passes(conn)

    monkeypatch.setattr(lite_wal, "checkpoint_wal", opening)
    monkeypatch.setattr(lite_wal, "checkpoint_passes", passing)
    store = DjangoSessionStore()
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=turn_id)
    n = 0

    async def journal() -> None:
        nonlocal n
        n += 1
        await store.journal(turn_id, None, Phase.BEFORE_PROVIDER, n=n)

    async def checkpointed(times: int) -> None:
        """Until the thread ran ``times`` more checkpoints, then kept its connection (idle)."""
        deadline = time.monotonic() + 10
        start = len(passes)
        while len(passes) - start < times:
            assert time.monotonic() < deadline, "no checkpoint ran"
            await journal()
            await asyncio.sleep(0.002)
        while not (
            lite_wal.checkpoints.idle and lite_wal.checkpoints.rest is None and lite_wal.checkpoints.files.empty()
        ):
            assert time.monotonic() < deadline, "the connection was not given back"
            await journal()  # moves the rest: the connection goes back to the thread
            await asyncio.sleep(0.002)

    await checkpointed(2)
    kept = len(opened)
    await checkpointed(6)
    assert len(opened) == kept and len(set(passes[-6:])) == 1 and passes[-1] is opened[-1]
    lite_wal.checkpoints.forget()
    await checkpointed(2)
    assert len(opened) == kept + 1 and passes[-1] is opened[-1]
    with pytest.raises(sqlite3.ProgrammingError):
        opened[-2].execute("SELECT 1")


def test_a_forked_child_checkpoints_on_its_own():
    """A forked child (a q2 worker) has none of its parent's threads and may not use its
    parent's SQLite connections: its checkpoints start over, with their own thread."""
    lite_conn._connection()  # its opening starts the thread
    parent = lite_wal.checkpoints
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        mine = lite_wal.checkpoints
        os._exit(0 if mine is not parent and mine.thread is None and mine.rest is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and lite_wal.checkpoints is parent


def test_a_short_lived_threads_connection_closes_with_it():
    turn_id = tid()
    host_ops.create_turn(REF, TurnInput(text="1"), turn_id=turn_id)
    opened: list[sqlite3.Connection] = []

    def use() -> None:
        asyncio.run(DjangoSessionStore().get_turn(turn_id))
        opened.append(lite_conn._local.own.conn)

    thread = threading.Thread(target=use)
    thread.start()
    thread.join()
    assert opened and opened[0] not in [own.conn for own in lite_conn._opened]
    with pytest.raises(sqlite3.ProgrammingError):
        opened[0].execute("SELECT 1")


async def test_a_turn_created_here_is_the_row_the_orm_creates():
    """``lite.create_turn`` writes the rows ``host_ops.create_turn`` writes (ids and times aside),
    and refuses what the rules refuse."""
    from django.contrib.auth.models import User

    from agents_app.runtime import SessionSuspendedError, TurnConflictError

    user = await sync_to_async(User.objects.create)(username="lite")
    store = DjangoSessionStore()
    policy = {"system": "s", "deny_tools": []}
    made = {}
    for how in ("orm", "lite"):
        turn_id, text = tid(), TurnInput(text="hi", source="web", by={"id": "u"})
        ref = SessionRef("ops", f"made-{how}")
        if how == "orm":
            outcome = await sync_to_async(host_ops.create_turn)(
                ref, text, turn_id=turn_id, policy=policy, created_by=user
            )
        else:
            outcome = lite.create_turn(ref, text, turn_id=turn_id, policy=policy, created_by=user)
        assert outcome.turn.turn_id == turn_id and outcome.events == [] and outcome.running == []
        made[how] = outcome.turn

    def rows(how: str) -> tuple[dict, dict]:
        s = m.Session.objects.filter(key=f"made-{how}").values().get()
        t = m.Turn.objects.filter(session_id=s["id"]).values().get()
        for row in (s, t):
            for column in ("id", "key", "session_id", "created_at", "updated_at"):
                row.pop(column, None)
        return s, t

    assert await sync_to_async(rows)("lite") == await sync_to_async(rows)("orm")
    assert made["lite"].input == made["orm"].input and made["lite"].policy == policy
    with pytest.raises(TurnConflictError):
        await store.create_turn(SessionRef("ops", "made-lite"), TurnInput(text="again"), turn_id=made["lite"].turn_id)
    second = tid()
    await store.create_turn(SessionRef("ops", "made-lite"), TurnInput(text="2"), turn_id=second)
    assert (await store.get_turn(second)).turn_id == second
    await sync_to_async(m.Turn.objects.filter(pk=made["lite"].turn_id).update)(status="suspended")
    with pytest.raises(SessionSuspendedError):
        await store.create_turn(SessionRef("ops", "made-lite"), TurnInput(text="3"), turn_id=tid())
    orders = await sync_to_async(
        lambda: list(m.Turn.objects.filter(session__key="made-lite").order_by("order").values_list("order", flat=True))
    )()
    assert orders == [1, 2]


async def test_a_load_decodes_only_the_messages_this_process_has_not_seen(monkeypatch):
    """``transcripts`` on the store's own connection, as on PostgreSQL's (test_django_opening):
    a session's messages this process read or wrote are not read again, so a load decodes the
    same few messages at 10 or 2,000 of history; what others wrote (here: a sync tool's unit, on
    Django's connection) is read; a reset reads nothing of the archived generation. Every load
    equals the plain one (``reads.load`` on Django's connection, which holds nothing)."""
    from collections import Counter

    from sessions_app.store import reads

    store = DjangoSessionStore()
    ref = SessionRef("ops", "seen")
    decoded: Counter[str] = Counter()
    from_json = Message.from_json.__func__
    monkeypatch.setattr(Message, "from_json", classmethod(lambda cls, d: decoded.update(["n"]) or from_json(cls, d)))

    def appended(turn_id, start, n, *, orm: bool = False):
        def work(tx):
            if orm:  # a sync tool's statement: the unit commits on Django's connection
                m.Session.objects.count()
            for i in range(start, start + n):
                tx.append(Message(Role.USER if i % 2 == 0 else Role.ASSISTANT, text=str(i), turn_id=turn_id), i)

        return work

    async def turn(start: int, n: int, *, unit: str) -> tuple[int, list[str]]:
        turn_id, attempt = tid(), tid()
        await store.create_turn(ref, TurnInput(text="x"), turn_id=turn_id)
        decoded.clear()
        state = await store.claim_and_load(turn_id, owner="w", attempt_id=attempt, now=time.time(), lease_seconds=60)
        loaded = decoded["n"], [msg.text for msg in state.transcript]
        decoded.clear()
        again = await store.load(turn_id)  # lite.load: held too
        assert decoded["n"] == 0 and [msg.text for msg in again.transcript] == loaded[1]
        plain = await sync_to_async(reads.load)(turn_id)
        assert [msg.text for msg in plain.transcript] == loaded[1]
        if n:
            write = store.commit if unit == "commit" else store.atomic
            await write(turn_id, attempt, appended(turn_id, start, n, orm=unit == "atomic"))
        await store.commit(turn_id, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED))
        return loaded

    assert await turn(0, 50, unit="commit") == (0, [])
    assert await turn(50, 3, unit="atomic") == (0, [str(i) for i in range(50)])  # all held
    assert await turn(53, 2, unit="commit") == (3, [str(i) for i in range(53)])  # the sync unit's 3 only
    assert await turn(55, 0, unit="commit") == (0, [str(i) for i in range(55)])
    lite.close_all()  # forgets what it held: the next load reads everything again
    assert await turn(55, 0, unit="commit") == (55, [str(i) for i in range(55)])
    await store.reset(ref)
    assert await turn(0, 0, unit="commit") == (0, [])


def _short_turns():
    """bench_short's turn (creation included; model -> sync tool -> model: 3 steps): a function
    running turn ``n`` of session ``key``. Its ids grow with ``n``: where a new id lands among
    the old ones in an index changes a lookup's VM instructions by one."""
    from agents_app.runtime import Agent, ScriptedModel, TurnExecutor, reply, tool

    @tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
    def noop(input, ctx):
        return {"ok": input.get("n")}

    store, agent = DjangoSessionStore(), Agent("bench", "You are a benchmark.", tools=[noop])
    prefix = tid()[:16]

    async def run(key: str, n: int) -> None:
        model = ScriptedModel([reply("", ("noop", {"n": n}), call_prefix=f"t{n}_"), reply("done")], chunk=1000)
        executor = TurnExecutor(
            store=store,
            sink=NullSink(),
            agent_for=lambda name: agent,
            model_for=lambda a: model,
            clock=time.time,
            lease_seconds=60,
        )
        turn_id = f"{prefix}{n:016x}"
        await store.create_turn(SessionRef("bench", key), TurnInput(text=f"check {n}"), turn_id=turn_id)
        assert await executor.drive(turn_id) == TurnStatus.COMPLETED

    return run


async def test_a_short_turns_statements_do_not_grow_with_the_sessions_history():
    """What a 3-step turn (creation included) asks of SQLite on the store's own connection, in
    VM instructions (``set_progress_handler``): the same after 3 turns of history as after 60.
    The chain's hand-off (``checkpoint.NEXT_IN_CHAIN``) once sorted every turn of the session."""
    run = _short_turns()

    async def one(n: int) -> int:
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        lite_conn._connection().set_progress_handler(count, 1)
        try:
            await run("grows", n)
        finally:
            lite_conn._connection().set_progress_handler(None, 1)
        return steps[0]

    counts = [await one(n) for n in range(64)]
    early, late = min(counts[3:6]), min(counts[60:])
    assert late <= early, (early, late)


#: the statements of a 3-step turn, creation included, by unit (BEGIN and COMMIT count):
#: - the creation (the session's place in the chain with its status and the start's facts, the
#:   turn);
#: - the claim, its load and the opening in one transaction: the claim answering the row, its
#:   steps, the new messages, then the opening's checkpoint (fence — with the journal's
#:   provider_started for the first model call: no journal write of its own — message, the
#:   events' numbers — a claimed turn is running already — and their read-back, event);
#: - the tool request (fence, message, events' numbers and read-back, event);
#: - the sync tool's run in a transaction on Django's connection (begun deferred: the no-op tool
#:   sends no SQL, so it is empty and takes no lock), then its step's checkpoint on the store's
#:   own connection (as the tool request's, its fence announcing the second model call);
#: - the last checkpoint (fence, message, status and numbers and read-back, two events, the
#:   chain's hand-off).
#: The read-back is a SELECT where a RETURNING made SQLite build a temporary b-tree: a statement
#: more, 1.9% fewer instructions a turn (``bench/count_short.py``: 4.507 M -> 4.423 M)
SHORT_TURN = [("lite", 4), ("lite", 10), ("lite", 7), ("django", 2), ("lite", 7), ("lite", 9)]


async def test_a_short_turn_costs_a_known_number_of_statements():
    """Every statement a 3-step turn runs on SQLite, on the store's own connection and on
    Django's (``set_trace_callback``), counted by transaction: a statement more is a choice
    made here, not a drift. The numbers (the events' and the messages') stay as they were."""
    from django.db import connection

    run = _short_turns()
    for n in range(3):  # a session with history; connections and statements warm
        await run("counted", n)
    seen: list[tuple[str, str]] = []

    def trace(where: str):
        return lambda sql: seen.append((where, sql.split(None, 1)[0].upper()))

    def on_django(callback) -> None:
        connection.ensure_connection()
        connection.connection.set_trace_callback(callback)

    lite_conn._connection().set_trace_callback(trace("lite"))
    await sync_to_async(on_django)(trace("django"))
    try:
        await run("counted", 3)
    finally:
        lite_conn._connection().set_trace_callback(None)
        await sync_to_async(on_django)(None)
    units: list[tuple[str, int]] = []
    open_unit = None
    for where, verb in seen:
        if open_unit is None:
            units.append((where, 0))
            open_unit = verb == "BEGIN"
        units[-1] = (where, units[-1][1] + 1)
        if verb == "COMMIT" or not open_unit:
            open_unit = None
    assert units == SHORT_TURN, units
    session = await sync_to_async(m.Session.objects.get)(key="counted")
    seqs = await sync_to_async(
        lambda: list(m.Event.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))
    )()
    assert seqs == list(range(1, len(seqs) + 1)) and session.event_seq == len(seqs) == 4 * 5
    assert session.status == "idle" and session.turn_seq == 4
    indexes = await sync_to_async(
        lambda: list(m.Message.objects.filter(session=session).order_by("index").values_list("index", flat=True))
    )()
    assert indexes == list(range(16))


def test_now_as_sqlite_takes_it_is_djangos_adaptation():
    """``checkpoint.plain_now`` writes out Django's SQLite adaptation of an aware now (naive UTC,
    ``str``): the same string shape, the same instant."""
    from datetime import datetime, timedelta

    from django.db import connection
    from django.utils import timezone

    from sessions_app.store import checkpoint

    assert checkpoint._utc_strings()
    before = connection.ops.adapt_datetimefield_value(timezone.now())
    mine = checkpoint.plain_now()
    after = connection.ops.adapt_datetimefield_value(timezone.now())
    assert before <= mine <= after and len(mine) in (19, 26)  # str() drops a zero microsecond
    assert abs(datetime.fromisoformat(mine) - datetime.fromisoformat(before)) < timedelta(seconds=1)
    # the second's text is made once and the microseconds added as str() writes them
    epoch = datetime(1970, 1, 1)
    for micros in (
        0,
        1,
        999_999,
        1_000_000,
        1_796_177_478_000_000,
        1_796_177_478_810_721,
        1_796_177_478_999_999,
        1_796_177_479_000_000,
        1_796_177_479_000_010,
        1_796_177_478_000_001,
    ):
        assert checkpoint.utc_string(micros) == str(epoch + timedelta(microseconds=micros)), micros


def test_only_a_sync_callers_coroutine_is_sent_to_its_thread():
    """``lite.here`` asks first whether a sync caller waits for the coroutine through
    ``async_to_sync`` (its open transaction must be seen). That answer is read off the context
    without asgiref's lookup when the context holds none of asgiref's values (a worker's loop):
    that lookup raises and catches an AttributeError, which cost more per unit than a statement.
    Both answers stay right."""
    assert lite_conn._executors_var is not None  # asgiref's layout as read: the fast answer is in use

    async def asked() -> tuple[bool, bool]:
        return lite_conn._waited_by_sync_caller(), lite.here()

    assert asyncio.run(asked()) == (False, True)
    assert async_to_sync(asked)() == (True, False)


# -- the opening in the claim's transaction --------------------------------------------------------


async def test_the_claim_commits_the_opening_it_is_offered_in_its_own_transaction():
    """``claim_and_load``'s ``opening`` (the loop's ``Opening``): on SQLite's own connection the
    claim's transaction writes the opening too; the state says so (``opened``: its events), and
    its transcript is the one before it, which the loop extends. A turn whose opening is written
    already is offered none (a second attempt)."""
    from agents_app.runtime.loop import Opening

    store = DjangoSessionStore()
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="hello"), turn_id=turn_id)
    first = tid()
    offer = Opening(first, max_attempts=5)
    state = await store.claim_and_load(turn_id, owner="w", attempt_id=first, now=100.0, lease_seconds=10, opening=offer)
    assert state is not None and state.transcript == []
    assert [(e.seq, e.event.type) for e in state.opened.events] == [(1, "turn.started")]
    assert [m.text for m in offer.recorded.appended] == ["hello"] and offer.key == f"{turn_id}:model:1:{first}"
    loaded = await store.load(turn_id)
    assert [(m.role, m.text) for m in loaded.transcript] == [(Role.USER, "hello")]
    assert loaded.turn.phase == Phase.PROVIDER_STARTED and loaded.turn.journal["stream_key"] == offer.key
    assert loaded.turn.attempt_id == first and loaded.turn.attempts == 1

    second = tid()  # the lease ran out: the next attempt finds the turn opened
    offer = Opening(second, max_attempts=5)
    state = await store.claim_and_load(
        turn_id, owner="w", attempt_id=second, now=200.0, lease_seconds=10, opening=offer
    )
    assert state.opened is None and offer.recorded is None
    assert [m.text for m in state.transcript] == ["hello"]


@pytest.mark.parametrize("why", ["cancelled", "over budget"])
async def test_a_turn_not_to_be_opened_is_offered_no_opening(why):
    from agents_app.runtime.loop import Opening

    store = DjangoSessionStore()
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="hello"), turn_id=turn_id)
    if why == "cancelled":
        await store.request_cancel(turn_id, "requested")
    attempt = tid()
    offer = Opening(attempt, max_attempts=0 if why == "over budget" else 5)
    state = await store.claim_and_load(
        turn_id, owner="w", attempt_id=attempt, now=100.0, lease_seconds=10, opening=offer
    )
    if state is None:  # a cancelled queued turn may be settled at once: nothing to claim
        assert why == "cancelled"
    else:
        assert state.opened is None and offer.recorded is None
    assert await sync_to_async(m.Message.objects.filter(turn_id=turn_id).count)() == 0


async def test_an_opening_that_fails_rolls_the_claim_back_with_it():
    """The claim and the opening are one transaction: a unit that raises leaves the turn queued,
    unclaimed and uncounted, with nothing written."""
    store = DjangoSessionStore()
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="hello"), turn_id=turn_id)

    def offer(state):
        def work(tx):
            tx.append(Message(Role.USER, text="hello", turn_id=turn_id), 0)
            raise RuntimeError("the process died here")

        return work

    with pytest.raises(RuntimeError):
        await store.claim_and_load(turn_id, owner="w", attempt_id=tid(), now=100.0, lease_seconds=10, opening=offer)
    rec = await store.get_turn(turn_id)
    assert rec.status == TurnStatus.QUEUED and rec.attempt_id is None and rec.attempts == 0
    assert await sync_to_async(m.Message.objects.filter(turn_id=turn_id).count)() == 0
    assert await sync_to_async(m.Event.objects.filter(turn_id=turn_id).count)() == 0


async def test_a_turn_opened_in_its_claim_runs_and_publishes_as_one_opened_by_the_loop():
    """Through the executor: the sink gets ``turn.started`` first, then the rest, numbered in
    order; the transcript and the events are those of a turn the loop opened itself (the
    in-memory store, which takes up no opening)."""
    from agents_app.runtime import Agent, InMemorySessionStore, RecordingSink, ScriptedModel, TurnExecutor, reply, tool

    @tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
    def noop(input, ctx):
        return {"ok": input.get("n")}

    agent = Agent("ops", "You are a test.", tools=[noop])

    async def drive(store):
        sink = RecordingSink()
        model = ScriptedModel([reply("", ("noop", {"n": 1}), call_prefix="a"), reply("done")], chunk=1000)
        executor = TurnExecutor(
            store=store,
            sink=sink,
            agent_for=lambda name: agent,
            model_for=lambda a: model,
            clock=time.time,
            lease_seconds=60,
        )
        turn_id = tid()
        await store.create_turn(REF, TurnInput(text="go"), turn_id=turn_id)
        assert await executor.drive(turn_id) == TurnStatus.COMPLETED
        state = await store.load(turn_id)
        return (
            [(m.role, m.text, m.result) for m in state.transcript],
            [(e.seq, e.event.type) for _, e in sink.published],
        )

    assert await drive(DjangoSessionStore()) == await drive(InMemorySessionStore())
