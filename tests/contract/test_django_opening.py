"""A turn's opening and closing on the Django store: how many round trips they take on
PostgreSQL, what a creation keeps (the session's owner, nothing when refused, the caller's
transaction), and the chain's hand-off racing a creation."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter

import pytest
from asgiref.sync import SyncToAsync
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.backends import utils as db_utils

from agents_app.runtime import (
    Agent,
    ScriptedModel,
    SessionRef,
    TurnConflictError,
    TurnExecutor,
    TurnInput,
    TurnStatus,
    reply,
    tool,
)
from sessions_app import models as m
from tests.conftest import is_postgres
from tests.contract.test_lock_order import _in_thread
from tests.contract.units import NullSink

pytestmark = pytest.mark.django_db(transaction=True)


def postgres_only() -> None:
    if not is_postgres():
        pytest.skip("round trips and row locks: PostgreSQL (SQLite has neither)")


class RoundTrips:
    """Counts what reaches the database: batches (``wire.Batch.run``, one round trip each),
    deferred batches (read back by the next run), statements through Django's cursors, and
    hops to asgiref's sync thread."""

    def __init__(self, monkeypatch) -> None:
        from sessions_app.store import wire

        self.counts: Counter[str] = Counter()
        for name, cls, attr in (
            ("batch", wire.Batch, "run"),
            ("deferred", wire.Batch, "defer"),
            ("django", db_utils.CursorWrapper, "_execute"),
            ("django", db_utils.CursorWrapper, "_executemany"),
            ("hop", SyncToAsync, "__call__"),
        ):
            monkeypatch.setattr(cls, attr, self._counting(name, getattr(cls, attr)))

    def _counting(self, name, fn):
        counts = self.counts

        if asyncio.iscoroutinefunction(fn):

            async def counted_async(*args, **kwargs):
                counts[name] += 1
                return await fn(*args, **kwargs)

            return counted_async

        def counted(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return counted

    def take(self) -> dict[str, int]:
        out = {k: v for k, v in self.counts.items() if v}
        self.counts.clear()
        return out


@tool("noop", "does nothing", {"type": "object", "properties": {"n": {"type": "integer"}}})
def noop(input, ctx):
    return {"ok": input.get("n")}


AGENT = Agent("bench", "You are a test.", tools=[noop])


def test_opening_and_closing_a_turn_take_one_round_trip_each(monkeypatch):
    """A 3-step turn (model -> sync tool -> model), creation included: the creation is one
    round trip, the claim with its load one, then one per checkpoint (the opening, the model
    step, the sync tool's step, the last model step, which also settles the turn and names the
    chain's next turn). The journal's provider_started rides in the checkpoint before each model
    call (the opening, the tool's step): no journal write of its own. The only thread hop is the
    sync tool's unit (its ORM writes share the checkpoint's transaction)."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore, direct

    store = DjangoSessionStore()
    ref = SessionRef("bench", "trips")
    handed: list = []

    async def on_runnable(runnable):
        handed.extend(runnable)

    async def scenario(counter: RoundTrips) -> list[dict[str, int]]:
        seen = []
        for n in range(3):  # the first warms the connection and its prepared statements
            model = ScriptedModel([reply("", ("noop", {"n": n}), call_prefix=f"t{n}_"), reply("done")], chunk=1000)
            executor = TurnExecutor(
                store=store,
                sink=NullSink(),
                agent_for=lambda name: AGENT,
                model_for=lambda a: model,
                clock=time.time,
                lease_seconds=60,
                on_runnable=on_runnable,
            )
            turn_id, queued = uuid.uuid4().hex, uuid.uuid4().hex
            counter.take()
            await store.create_turn(ref, TurnInput(text=f"check {n}"), turn_id=turn_id)
            created = counter.take()
            await store.create_turn(ref, TurnInput(text="behind it"), turn_id=queued)
            counter.take()
            handed.clear()
            assert await executor.drive(turn_id) == TurnStatus.COMPLETED
            seen.append({"create": created, "drive": counter.take(), "handed": list(handed), "queued": queued})
            await store.request_cancel(queued, "requested")
        return seen

    counter = RoundTrips(monkeypatch)
    try:
        seen = asyncio.run(scenario(counter))
    finally:
        direct.close_all()
    for turn in seen[1:]:
        assert turn["create"] == {"batch": 1}
        assert turn["drive"] == {"batch": 1 + 4, "hop": 1}
        assert turn["handed"] == [(turn["queued"], ref)]  # no read after the turn


def batches_sent(monkeypatch) -> list[list[bytes]]:
    """The statements of each batch that reaches the database from here on (a list it fills)."""
    from sessions_app.store import wire

    sent: list[list[bytes]] = []
    run = wire.Batch.run

    def counted(batch):
        sent.append([sql for sql, _ in batch.commands])
        return run(batch)

    monkeypatch.setattr(wire.Batch, "run", counted)
    return sent


def test_a_checkpoint_inserts_its_rows_in_one_statement_each_and_a_parentless_turn_reports_nothing(monkeypatch):
    """A checkpoint's messages (with the step guard before them) and its events are one
    multi-row statement each, not one per row; a turn this process claimed, which has no
    parent, settles without the child's report to a parent (a statement that found none)."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore, child_reports, direct

    store = DjangoSessionStore()
    ref = SessionRef("bench", "statements")
    sent = batches_sent(monkeypatch)

    async def scenario() -> None:
        model = ScriptedModel([reply("", ("noop", {"n": 1}), ("noop", {"n": 2})), reply("done")], chunk=1000)
        executor = TurnExecutor(
            store=store,
            sink=NullSink(),
            agent_for=lambda name: AGENT,
            model_for=lambda a: model,
            clock=time.time,
            lease_seconds=60,
        )
        turn_id = uuid.uuid4().hex
        await store.create_turn(ref, TurnInput(text="two tools"), turn_id=turn_id)
        sent.clear()
        assert await executor.drive(turn_id) == TurnStatus.COMPLETED

    try:
        asyncio.run(scenario())
    finally:
        direct.close_all()
    statements = [sql for batch in sent for sql in batch]
    assert child_reports.REPORT_PG not in statements
    for batch in sent:
        assert sum(b"INSERT INTO sessions_app_message" in sql for sql in batch) <= 1, batch
        assert sum(b"INSERT INTO sessions_app_event" in sql for sql in batch) <= 1, batch
        assert not any(sql.startswith(b"SELECT june_step_recorded") for sql in batch), batch
    # a unit's two events in one statement; the step guard rides in the unit's opening statement
    assert any(b"INSERT INTO sessions_app_event" in sql and b"), (" in sql for sql in statements)
    assert any(b"g AS MATERIALIZED (SELECT june_step_recorded" in sql for sql in statements)


def test_a_creation_marks_its_session_running_without_recomputing_its_status(monkeypatch):
    """A creation is one statement, a new session's or an existing one's: the session inserted as
    the creation leaves it, or locked, checked and updated; then the turn's insert. The session is
    marked running and stamped: what recomputing the status answered once the creation passed the
    check (no parked turn, a queued one in the chain)."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore, checkpoint_pg, direct

    sent = batches_sent(monkeypatch)
    store = DjangoSessionStore()
    ref = SessionRef("bench", "marked")
    try:
        asyncio.run(store.create_turn(ref, TurnInput(text="first"), turn_id=uuid.uuid4().hex))
        m.Session.objects.filter(key="marked").update(status="idle")
        before = m.Session.objects.get(key="marked").updated_at
        asyncio.run(store.create_turn(ref, TurnInput(text="second"), turn_id=uuid.uuid4().hex))
    finally:
        direct.close_all()
    assert [len(batch) for batch in sent[-2:]] == [1, 1]
    assert checkpoint_pg.SESSION_STATUS_BY_TURN not in sent[-1]
    session = m.Session.objects.get(key="marked")
    assert session.status == "running" and session.updated_at > before and session.turn_seq == 2


def test_a_new_sessions_row_is_written_once():
    """A new session is inserted as its first creation leaves it (running, its first turn's place
    taken), not inserted and then updated: the creation's transaction updates no session row.
    An existing session's creation updates its row once."""
    postgres_only()
    from sessions_app.store import opening

    conn = _own_connection()
    written = "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'sessions_app_session'"
    seen = []
    try:
        for turn_id in ("once1", "once2"):
            conn.execute("BEGIN")
            opening.create(
                conn, SessionRef("ops", "once"), TurnInput(text="x"), turn_id=turn_id, ends_transaction=False
            )
            seen.append(conn.execute(written).fetchone())  # this backend's counts not yet reported
            conn.execute("COMMIT")
    finally:
        conn.close()
    assert seen[0] == (1, 0) and seen[1][1] == 1  # the new session: inserted, never updated
    session = m.Session.objects.get(key="once")
    assert (session.turn_seq, session.status) == (2, "running")


def _own_connection():
    import psycopg
    from django.db import connections

    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    params["prepare_threshold"] = None
    return psycopg.connect(**params, autocommit=True)


def test_a_creation_racing_another_for_a_new_session_takes_the_next_place():
    """Two first creations of one session at once: the one whose statement began before the other
    committed the session does not see it (its snapshot) and finds no row to use; it creates its
    turn in the same three statements as before, after the other's."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore, direct, opening

    ref = SessionRef("ops", "raced")
    other = _own_connection()
    try:
        other.execute("BEGIN")
        opening.create(other, ref, TurnInput(text="first"), turn_id="first", ends_transaction=False)
        thread, out = _in_thread(
            lambda: asyncio.run(DjangoSessionStore().create_turn(ref, TurnInput(text="second"), turn_id="second"))
        )
        time.sleep(0.5)  # the second's statement waits for the first's row
        assert thread.is_alive()
        other.execute("COMMIT")
        thread.join(30)
    finally:
        other.close()
        direct.close_all()
    assert "error" not in out, out
    orders = dict(m.Turn.objects.filter(session__key="raced").values_list("id", "order"))
    assert orders == {"first": 1, "second": 2}
    assert m.Session.objects.get(key="raced").turn_seq == 2


def test_a_creations_rows_are_the_ones_the_orm_inserts():
    """The creation's batch writes the model's defaults as literals of its statements and sends
    only what varies (``opening.Row``): its session and turn rows are the ORM's (ids and times
    aside, and the session as the creation leaves it: running, its first turn taken), and the
    record it returns is the one read back."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore, host_ops

    user = _user("rows")
    policy = {"system": "s", "deny_tools": ["x"]}
    text = TurnInput(text="hi", source="http", by={"id": "u"})
    turn_id = uuid.uuid4().hex
    outcome = host_ops.create_turn(
        SessionRef("ops", "rows-wire"), text, turn_id=turn_id, policy=policy, created_by=user
    )
    session = m.Session.objects.create(agent="ops", key="rows-orm", owner=user, status="running", turn_seq=1)
    m.Turn.objects.create(
        id=uuid.uuid4().hex,
        session=session,
        order=1,
        status=TurnStatus.QUEUED,
        kind=text.kind,
        source="http",
        input=text.to_json(),
        policy=policy,
        created_by=user,
    )

    def rows(key: str) -> tuple[dict, dict]:
        s = m.Session.objects.filter(key=key).values().get()
        t = m.Turn.objects.filter(session_id=s["id"]).values().get()
        for row in (s, t):
            for column in ("id", "key", "session_id", "created_at", "updated_at"):
                row.pop(column, None)
        return s, t

    assert rows("rows-wire") == rows("rows-orm")
    made = m.Turn.objects.get(pk=turn_id)
    assert made.created_at == made.updated_at == made.session.created_at
    assert outcome.turn == asyncio.run(DjangoSessionStore().get_turn(turn_id))


def test_a_creation_on_djangos_connection_is_one_round_trip(monkeypatch):
    """The services' path (``own_connection=False``): on the request's thread, in one round trip."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore(own_connection=False)
    counter = RoundTrips(monkeypatch)
    for n in range(2):
        counter.take()
        store.create_turn_sync(SessionRef("ops", "host"), TurnInput(text="x"), turn_id=uuid.uuid4().hex)
        created = counter.take()
    assert created == {"batch": 1}


def test_a_creation_outside_a_transaction_opens_no_atomic_block(monkeypatch):
    """Outside a transaction the creation's round trip is a transaction of its own (committed at
    its Sync, or none of it): no atomic block around it, whose bookkeeping was all it added.
    Inside the caller's transaction it still takes a savepoint (``test_a_creation_belongs_to_the_callers_transaction``)."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore

    entered = []
    real = transaction.Atomic.__enter__
    monkeypatch.setattr(transaction.Atomic, "__enter__", lambda self: entered.append(self) or real(self))
    store = DjangoSessionStore(own_connection=False)
    turn_id = uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", "no-block"), TurnInput(text="x"), turn_id=turn_id)
    assert entered == [] and m.Turn.objects.filter(pk=turn_id, session__key="no-block").exists()
    with transaction.atomic():
        store.create_turn_sync(SessionRef("ops", "no-block"), TurnInput(text="y"), turn_id=uuid.uuid4().hex)
    assert len(entered) == 2  # the caller's block, and the creation's savepoint


def _user(name: str):
    return get_user_model().objects.create_user(username=name, password="x")


def test_a_new_session_is_owned_by_its_first_creator_and_only_its_owner_creates_in_it():
    """A user's creation applies the ownership itself (``access.start_checked_by_store``): in
    another user's session it writes nothing and raises NotSessionOwner; a creation that names
    no user (a webhook's, an eval's) is not held to an owner."""
    from sessions_app.site_errors import NotSessionOwner
    from sessions_app.store import DjangoSessionStore

    alice, bob = _user("alice"), _user("bob")
    for store in (DjangoSessionStore(), DjangoSessionStore(own_connection=False)):
        first, second, third = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
        ref = SessionRef("ops", f"owned-{store.own_connection}")
        asyncio.run(store.create_turn(ref, TurnInput(text="1"), turn_id=first, created_by=alice))
        with pytest.raises(NotSessionOwner):
            asyncio.run(store.create_turn(ref, TurnInput(text="2"), turn_id=second, created_by=bob))
        asyncio.run(store.create_turn(ref, TurnInput(text="3"), turn_id=third))
        session = m.Session.objects.get(agent=ref.agent, key=ref.key)
        assert session.owner_id == alice.pk and session.status == "running"
        turns = {t.id: t for t in m.Turn.objects.filter(session=session)}
        assert set(turns) == {first, third} and turns[first].created_by_id == alice.pk
        assert (turns[first].order, turns[third].order) == (1, 2)
        assert m.Session.objects.get(pk=session.pk).turn_seq == 2
        nobodys = m.Session.objects.create(agent="ops", key=f"nobody-{store.own_connection}")
        with pytest.raises(NotSessionOwner):  # a session with no owner: no user creates in it
            asyncio.run(
                store.create_turn(SessionRef("ops", nobodys.key), TurnInput(text="x"), turn_id=second, created_by=bob)
            )
        assert not m.Turn.objects.filter(pk=second).exists()


def test_a_refused_creation_writes_nothing():
    from sessions_app.store import DjangoSessionStore

    for store in (DjangoSessionStore(), DjangoSessionStore(own_connection=False)):
        turn_id = uuid.uuid4().hex
        asyncio.run(store.create_turn(SessionRef("ops", "first"), TurnInput(text="1"), turn_id=turn_id))
        fresh = SessionRef("ops", f"fresh-{store.own_connection}")
        with pytest.raises(TurnConflictError):
            asyncio.run(store.create_turn(fresh, TurnInput(text="again"), turn_id=turn_id))
        assert not m.Session.objects.filter(key=fresh.key).exists()  # not even the session
        assert m.Turn.objects.get(pk=turn_id).session.key == "first"


def test_a_creation_belongs_to_the_callers_transaction():
    """As a webhook's: the turn commits or rolls back with the caller's rows, and a refusal
    leaves the caller's transaction usable."""
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore(own_connection=False)
    gone, kept, taken = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", "taken"), TurnInput(text="x"), turn_id=taken)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            store.create_turn_sync(SessionRef("ops", "caller"), TurnInput(text="x"), turn_id=gone)
            raise RuntimeError("the caller fails after the creation")
    assert not m.Turn.objects.filter(pk=gone).exists()
    with transaction.atomic():
        m.Session.objects.create(agent="ops", key="callers-row")
        with pytest.raises(TurnConflictError):
            store.create_turn_sync(SessionRef("ops", "caller"), TurnInput(text="x"), turn_id=taken)
        store.create_turn_sync(SessionRef("ops", "caller"), TurnInput(text="x"), turn_id=kept)
    assert m.Session.objects.filter(key="callers-row").exists() and m.Turn.objects.filter(pk=kept).exists()


def test_the_hand_off_never_misses_a_turn_created_as_the_chain_ends():
    """A turn created while the running turn of its session settles is dispatched by one of
    the two: the settling unit names it (it was created first), or its creator's dispatch
    claims it (the settling unit committed first). Never neither."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore, direct

    store = DjangoSessionStore()
    ref = SessionRef("ops", "race")
    missed = []
    for n in range(40):
        running, attempt = uuid.uuid4().hex, uuid.uuid4().hex
        store.create_turn_sync(ref, TurnInput(text="runs"), turn_id=running)
        assert store.claim_sync(running, owner="w", attempt_id=attempt, now=1.0, lease_seconds=600)
        late = uuid.uuid4().hex
        go = threading.Barrier(2)

        def settle():
            go.wait()
            commit = store.commit_direct(
                direct.connection(), running, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED)
            )
            return [turn_id for turn_id, _ in commit.runnable]

        def create():
            go.wait()
            own = DjangoSessionStore()
            asyncio.run(own.create_turn(ref, TurnInput(text="late"), turn_id=late))
            return (
                asyncio.run(
                    own.claim_and_load(late, owner="w2", attempt_id=uuid.uuid4().hex, now=2.0, lease_seconds=600)
                )
                is not None
            )

        (settler, settled), (creator, created) = _in_thread(settle), _in_thread(create)
        settler.join(30)
        creator.join(30)
        assert "error" not in settled and "error" not in created, (settled, created)
        out = {"handed": settled["value"], "claimed": created["value"]}
        if not (late in out.get("handed", []) or out.get("claimed")):
            missed.append((n, out))
        m.Turn.objects.filter(pk=late).update(status=TurnStatus.COMPLETED)
    direct.close_all()
    assert missed == []


def test_a_load_decodes_only_the_messages_this_process_has_not_seen(monkeypatch):
    """``transcripts``: a session's messages this process read or wrote are not read again; what
    others wrote (here: a sync tool's unit, on Django's connection) is; a reset reads nothing
    of the archived generation. Every load equals the plain one (``reads.load``)."""
    postgres_only()
    from agents_app.runtime import Message, Role
    from sessions_app.store import DjangoSessionStore, direct

    store = DjangoSessionStore()
    ref = SessionRef("ops", "seen")
    decoded = Counter()
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
        turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
        await store.create_turn(ref, TurnInput(text="x"), turn_id=turn_id)
        decoded.clear()
        state = await store.claim_and_load(turn_id, owner="w", attempt_id=attempt, now=time.time(), lease_seconds=60)
        loaded = decoded["n"], [m.text for m in state.transcript]
        plain = await store.load(turn_id)  # reads.load: the plain load
        assert [m.text for m in plain.transcript] == loaded[1]
        if n:
            write = store.commit if unit == "commit" else store.atomic
            await write(turn_id, attempt, appended(turn_id, start, n, orm=unit == "atomic"))
        await store.commit(turn_id, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED))
        return loaded

    async def scenario():
        try:
            assert await turn(0, 50, unit="commit") == (0, [])
            assert await turn(50, 3, unit="atomic") == (0, [str(i) for i in range(50)])  # all held
            assert await turn(53, 0, unit="commit") == (3, [str(i) for i in range(53)])  # the 3 unit's only
            assert (await turn(53, 0, unit="commit"))[0] == 0
            await store.reset(ref)
            assert await turn(0, 0, unit="commit") == (0, [])
        finally:
            await asyncio.to_thread(direct.close_all)

    asyncio.run(scenario())


def test_a_claim_waiting_for_its_session_holds_no_turn_lock():
    """The lock order (``sessions_app.store``): a claim with its load locks the turn's session
    before its turn, as a replace does (session, then its turns): a claim blocked on the
    session has not touched the turn row, so the replace goes on and nothing deadlocks."""
    postgres_only()
    from sessions_app.store import DjangoSessionStore
    from tests.contract.test_lock_order import _connect
    from tests.fault.qcluster import wait_for

    store = DjangoSessionStore()
    turn_id = uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", "claim-order"), TurnInput(text="x"), turn_id=turn_id)
    session_id = m.Turn.objects.get(pk=turn_id).session_id
    holder = _connect(autocommit=False)
    try:
        holder.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [session_id])
        thread, out = _in_thread(
            lambda: asyncio.run(
                store.claim_and_load(turn_id, owner="w", attempt_id=uuid.uuid4().hex, now=1.0, lease_seconds=60)
            )
        )
        wait_for(
            lambda: holder.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0,
            timeout=20,
            what="the claim to wait for the session lock",
        )
        holder.execute("SELECT 1 FROM sessions_app_turn WHERE id = %s FOR UPDATE NOWAIT", [turn_id])
        holder.commit()
        thread.join(20)
        assert "error" not in out, out.get("error")
        assert out["value"].turn.status == TurnStatus.RUNNING
    finally:
        holder.close()
