"""The store's lock order (sessions_app.store): the session row, then its turns' rows — in a
checkpoint as in the host operations (create, replace, cancel, answer, reset).

PostgreSQL only: these are row locks; SQLite has one database-wide write lock and no order.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from django.db import connections

from agents_app.runtime import Message, Role, SessionRef, TurnInput
from agents_app.runtime import events as ev
from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from tests.conftest import is_postgres
from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres_only():
    if not is_postgres():
        pytest.skip("row-lock order: SQLite has a single database write lock")


def _connect(autocommit: bool) -> psycopg.Connection:
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=autocommit)


def _claimed(key: str) -> tuple[object, str, str]:
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", key), TurnInput(text="x"), turn_id=turn_id)
    store.claim_sync(turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=600)
    return store, turn_id, attempt


def _step(turn_id: str, n: int):
    def work(tx):
        tx.append(Message(Role.USER, text=f"m{n}", turn_id=turn_id), n)
        tx.emit(ev.MessageCompleted(turn_id, text=f"m{n}"))

    return work


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        from sessions_app.store import direct

        try:
            out["value"] = fn()
        except BaseException as exc:  # reported to the test
            out["error"] = exc
        finally:
            conn = getattr(direct._local, "conn", None)
            if conn is not None:
                conn.close()
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_a_checkpoint_waiting_for_its_session_holds_no_turn_lock():
    """Pins the DeadlockDetected of 400 sequential ``replace=true`` POSTs (issue 13, item 8): a
    checkpoint locked its turn's row (the fence) and then its session's (the event counter),
    while ``create_turn(replace=True)`` locked the session and then its turns. Now a checkpoint
    blocked on its session's lock has not touched the turn row yet."""
    store, turn_id, attempt = _claimed("lock-order")
    session_id = m.Turn.objects.get(pk=turn_id).session_id
    holder = _connect(autocommit=False)  # a replace in progress: the session row is locked
    try:
        holder.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [session_id])

        def checkpoint():
            from sessions_app.store import direct

            return store.commit_direct(direct.connection(), turn_id, attempt, _step(turn_id, 0))

        thread, out = _in_thread(checkpoint)
        wait_for(
            lambda: holder.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0,
            timeout=20,
            what="the checkpoint to wait for the session lock",
        )
        # the replace goes on to its turns: under the old order the fence held this row -> deadlock
        holder.execute("SELECT 1 FROM sessions_app_turn WHERE id = %s FOR UPDATE NOWAIT", [turn_id])
        holder.commit()
        thread.join(20)
        assert "error" not in out, out.get("error")
        assert [e.event.type for e in out["value"].events] == ["message.completed"]
    finally:
        holder.close()


def test_a_settling_checkpoint_waiting_for_its_session_holds_no_turn_lock():
    """A unit that moves the turn's status (here: settles it) takes its session's lock in its
    fence's own statement, not in a statement of its own before it (a statement fewer per turn):
    blocked on that lock, it has not touched the turn's row either, and once the lock is free it
    fences the turn's newest row (the holder's change to it included) and settles it."""
    from sessions_app.store import checkpoint_pg, direct, transcripts

    store, turn_id, attempt = _claimed("settle-order")
    session_id = m.Turn.objects.get(pk=turn_id).session_id
    transcripts.remember_facts(turn_id, (session_id, 0, None, ""))
    holder = _connect(autocommit=False)
    try:
        holder.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [session_id])

        def settle():
            return checkpoint_pg.write_postgresql(
                direct.connection(),
                turn_id,
                attempt,
                {"status": TurnStatus.COMPLETED, "text": "done"},
                [(0, Message(Role.ASSISTANT, text="done", turn_id=turn_id))],
                [("model:1", 0, None)],
                [ev.TurnCompleted(turn_id, text="done")],
            )

        thread, out = _in_thread(settle)
        wait_for(
            lambda: holder.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0,
            timeout=20,
            what="the settling checkpoint to wait for the session lock",
        )
        holder.execute("SELECT 1 FROM sessions_app_turn WHERE id = %s FOR UPDATE NOWAIT", [turn_id])
        holder.execute("UPDATE sessions_app_turn SET cancel_reason = 'user' WHERE id = %s", [turn_id])
        holder.commit()
        thread.join(20)
        assert "error" not in out, out.get("error")
        assert out["value"].cancel_reason == "user"  # the newest row's, read at the fence
        assert [e.event.type for e in out["value"].events] == ["turn.completed"]
    finally:
        holder.close()
        transcripts.clear()
    turn = m.Turn.objects.get(pk=turn_id)
    assert (turn.status, turn.text) == (TurnStatus.COMPLETED, "done")


def test_checkpoints_and_replaces_of_one_session_never_deadlock():
    """The same deadlock under load: a worker checkpointing its running turn (events and a status
    change, the statements that touch the session row) while a client replaces turns of the same
    session over and over. Zero DeadlockDetected."""
    from sessions_app.store import host_ops

    store, turn_id, attempt = _claimed("storm")
    ref = SessionRef("ops", "storm")
    stop = threading.Event()
    n_steps = 300

    def worker():
        from sessions_app.store import direct

        raw = direct.connection()
        for n in range(n_steps):
            if stop.is_set():
                break
            store.commit_direct(raw, turn_id, attempt, _step(turn_id, n))
        return n_steps

    def replacer():
        count = 0
        while not stop.is_set():
            host_ops.create_turn(ref, TurnInput(text="again"), turn_id=uuid.uuid4().hex, replace=True)
            count += 1
        return count

    threads = [_in_thread(worker), _in_thread(replacer)]
    threads[0][0].join(120)
    stop.set()
    threads[1][0].join(120)
    errors = [out["error"] for _, out in threads if "error" in out]
    assert not errors, errors
    assert threads[1][1]["value"] > 0
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.status == TurnStatus.RUNNING and turn.cancel_reason == "replaced"
    assert m.Message.objects.filter(turn_id=turn_id).count() == n_steps


def test_a_checkpoint_numbering_its_events_locks_its_session_by_numbering_them():
    """A unit that logs events and leaves the session's status as it is takes the session's row
    by the event numbering's UPDATE, first in its one statement (no ``SELECT … FOR NO KEY
    UPDATE`` of its own), and fences the turn after it in the same statement. One that
    recomputes the status locks it in its opening statement, first, and numbers after it (the
    status reads the turn's new one)."""
    from sessions_app.store import checkpoint, checkpoint_pg, unit_sql

    event = ev.MessageCompleted("t", text="x")
    batch = next(checkpoint_pg.write_steps("t", "a", {"phase": "x"}, [], [], [event]))
    statements = [sql for sql, _ in batch.commands]
    fence = checkpoint.fence_sql("t", "a", {"phase": "x"})[0]
    assert statements == [unit_sql.unit_statement(fence, "number turn", events=1)]
    assert statements[0].startswith(b"WITH numbering AS (UPDATE sessions_app_session SET event_seq = ")
    assert unit_sql.LOCK_SESSION not in statements
    settled = next(checkpoint_pg.write_steps("t", "a", {"status": TurnStatus.COMPLETED}, [], [], [event]))
    statements = [sql for sql, _ in settled.commands]
    # its opening statement locks the session first, in the fence's own statement
    assert statements[0].startswith(b"WITH l AS MATERIALIZED (SELECT 1 FROM sessions_app_session WHERE id = ")
    assert b"june_lease_lost" in statements[0] and unit_sql.LOCK_SESSION not in statements
    assert len(statements) == 2
    # (and, as it settles the turn, reads the chain's next turn in the same statement)
    numbering = checkpoint_pg.numbered_events_sql(checkpoint_pg.STATUS_AND_EVENT_SEQ_SQL, 1, chain=True)
    assert statements.index(numbering) == 1 and checkpoint_pg.NEXT_IN_CHAIN_PG not in statements


def test_a_claim_marks_its_session_running_in_its_own_statement():
    """The claim's batch: one statement that takes the session's lock, then claims, which also
    marks the session running, turns the flush off for its transaction and reads the load (its
    steps, its transcript) of the row it claimed; and it does all of it."""
    from sessions_app.store import opening

    batch = next(opening.claim_and_load_steps("t", owner="w", attempt_id="a", now=1.0, lease_seconds=30))
    statements = [sql for sql, _ in batch.commands]
    assert statements == [opening.CLAIM_LOCKED]
    assert statements[0].startswith(b"WITH l AS MATERIALIZED (SELECT 1 FROM sessions_app_session WHERE id = ")
    from sessions_app.store import DjangoSessionStore

    turn_id = uuid.uuid4().hex
    DjangoSessionStore().create_turn_sync(SessionRef("ops", "claim-marks"), TurnInput(text="x"), turn_id=turn_id)
    m.Session.objects.filter(key="claim-marks").update(status="idle")  # (a queued turn's reads running)
    raw = _connect(autocommit=True)
    try:
        state = opening.claim_and_load(raw, turn_id, owner="w", attempt_id="a", now=1.0, lease_seconds=600)
        assert state is not None and state.turn.turn_id == turn_id
        assert opening.claim_and_load(raw, turn_id, owner="v", attempt_id="b", now=2.0, lease_seconds=600) is None
    finally:
        raw.close()
    assert m.Turn.objects.get(pk=turn_id).status == "running"
    assert m.Session.objects.get(key="claim-marks").status == "running"


def test_a_claim_that_waited_for_the_turn_before_it_to_settle_claims():
    """The claim's one statement reads the session's chain in a snapshot taken before it waited
    for the session's lock: there, the turn before it in the chain still runs. Held by the unit
    that settles that turn, the claim claimed nothing although, once the lock was free, its turn
    was the chain's head; it is sent again after the lock (as two statements) and claims."""
    from sessions_app.store import DjangoSessionStore, opening, transcripts

    store = DjangoSessionStore()
    ref = SessionRef("ops", f"waited-{uuid.uuid4().hex[:8]}")
    first, second = uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(ref, TurnInput(text="one"), turn_id=first)
    store.create_turn_sync(ref, TurnInput(text="two"), turn_id=second)
    session_id = m.Turn.objects.get(pk=first).session_id
    holder = _connect(autocommit=False)  # the first turn's settling unit, under the session's lock
    try:
        holder.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR NO KEY UPDATE", [session_id])
        holder.execute("UPDATE sessions_app_turn SET status = 'completed' WHERE id = %s", [first])

        def claim():
            raw = _connect(autocommit=True)
            try:
                return opening.claim_and_load(raw, second, owner="w", attempt_id="a", now=1.0, lease_seconds=60)
            finally:
                raw.close()

        thread, out = _in_thread(claim)
        wait_for(
            lambda: holder.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0,
            timeout=20,
            what="the claim to wait for the session lock",
        )
        holder.commit()
        thread.join(20)
    finally:
        holder.close()
        transcripts.clear()
    assert "error" not in out, out.get("error")
    assert out["value"] is not None and out["value"].turn.turn_id == second
    assert m.Turn.objects.get(pk=second).status == TurnStatus.RUNNING
