"""What a claimed turn's statements send on PostgreSQL.

A checkpoint whose turn's session and generation the process knows (its claim read them:
``transcripts.facts``) takes them as parameters: its statements read no turn row to find them,
and bind the turn's stored reference (``checkpoint_pg.known_ref``) instead of computing it per row
in the server (``june_tid``). What they write is what the statements that read them write.

A heartbeat commits without waiting for the WAL flush, for its own transaction only.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.db import connections

from agents_app.runtime import Message, Role, SessionRef, TurnInput
from agents_app.runtime import events as ev
from agents_app.runtime.seams import SessionStatus, TurnStatus
from sessions_app import models as m
from sessions_app.store import checkpoint_pg, transcripts
from tests.conftest import is_postgres

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_unit_of_a_turn_whose_session_is_known_reads_no_turn_row_for_it():
    """Each statement of a unit found the turn's session and generation by the turn's key (a
    lookup of the turn's row in the event numbering, the event and message inserts, the session's
    lock and its status), and computed the turn's stored reference with a regular expression per
    row, although the claim had read both and neither ever changes. Only the fence reads the
    turn's row now (the step guard and the unit's first inserts read the fence's)."""
    turn_id = uuid.uuid4().hex
    transcripts.remember_facts(turn_id, (7, 2, None, ""))
    try:
        message = [(3, Message(Role.ASSISTANT, text="x", turn_id=turn_id))]
        event = [ev.MessageCompleted(turn_id, text="x")]
        for changes, steps in (({"phase": "x"}, []), ({"status": TurnStatus.COMPLETED}, [("model:3", 3, None)])):
            batch = next(checkpoint_pg.write_steps(turn_id, "a", changes, message, steps, event))
            for sql, params in batch.commands:
                text = sql.decode()
                if "june_lease_lost" in text:  # the unit's opening statement: the session by its key
                    assert text.startswith(
                        (
                            "WITH numbering AS (UPDATE sessions_app_session SET event_seq = event_seq + $1::integer "
                            "WHERE id = $2::bigint",
                            "WITH l AS MATERIALIZED (SELECT 1 FROM sessions_app_session "
                            "WHERE id = $1::bigint FOR NO KEY UPDATE)",
                        )
                    ), text
                    assert b"7" in params[:2]
                    # its guard and inserts read the fence's row, which the fence reads by the turn's key
                    text = text.split(" RETURNING id, cancel_reason, session_id, generation, opening)", 1)[1]
                # (the status's recompute reads the session's turns, by the session)
                assert "t.id = " not in text and "sessions_app_turn WHERE id" not in text, text
                assert "june_tid" not in text, text
                if "INSERT" in text:  # the turn's reference, bound
                    assert f"\\x{turn_id}".encode() in params, params
            assert b"june_lease_lost" in batch.commands[0][0]
    finally:
        transcripts.clear()


def _connect() -> psycopg.Connection:
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)


@pytest.mark.skipif("not is_postgres()")
def test_a_known_session_writes_what_a_looked_up_one_does():
    """A claimed turn's units (the claim remembered its session) write their messages and events
    under the turn's session, generation and reference, number the events after the session's,
    and the settling unit hands the session's chain to its next turn, as before."""
    from sessions_app.store import DjangoSessionStore, opening

    store = DjangoSessionStore()
    ref = SessionRef("ops", f"known-{uuid.uuid4().hex[:8]}")
    first, second, attempt = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(ref, TurnInput(text="one"), turn_id=first)
    store.create_turn_sync(ref, TurnInput(text="two"), turn_id=second)
    session = m.Session.objects.get(agent=ref.agent, key=ref.key)
    transcripts.clear()
    raw = _connect()
    try:
        state = opening.claim_and_load(raw, first, owner="w", attempt_id=attempt, now=1.0, lease_seconds=600)
        assert state is not None
        assert transcripts.facts(first) == (session.pk, session.generation, None, "")
        opened = checkpoint_pg.write_postgresql(
            raw,
            first,
            attempt,
            {"phase": "provider_started"},
            [(0, Message(Role.USER, text="one", turn_id=first))],
            [],
            [ev.TurnStarted(first, trigger="inbound"), ev.MessageCompleted(first, text="one")],
        )
        settled = checkpoint_pg.write_postgresql(
            raw,
            first,
            attempt,
            {"status": TurnStatus.COMPLETED, "text": "done"},
            [(1, Message(Role.ASSISTANT, text="done", turn_id=first))],
            [("model:1", 1, None)],
            [ev.TurnCompleted(first, text="done")],
        )
    finally:
        raw.close()
        transcripts.clear()
    assert (opened.session_id, opened.generation) == (session.pk, session.generation)
    assert [e.seq for e in opened.events] == [1, 2] and [e.seq for e in settled.events] == [3]
    rows = list(m.Message.objects.filter(session=session).order_by("index").values_list("index", "turn_id", "step"))
    assert rows == [(0, first, None), (1, first, "model:1")]
    events = list(m.Event.objects.filter(session=session).order_by("seq").values_list("seq", "turn_id", "generation"))
    assert events == [(1, first, 0), (2, first, 0), (3, first, 0)]
    assert [turn for turn, _ in settled.runnable] == [second]
    session.refresh_from_db()
    assert session.event_seq == 3 and session.status == SessionStatus.RUNNING  # the second turn is queued
    assert m.Turn.objects.get(pk=first).status == TurnStatus.COMPLETED
    assert is_postgres()


@pytest.mark.skipif("not is_postgres()")
def test_a_heartbeat_turns_the_flush_off_for_its_own_transaction():
    """A heartbeat on PostgreSQL (a new version of the turn's row every third of a lease, as long
    as the turn runs) waited for the WAL flush at its commit, as a checkpoint does, although a beat
    lost with the server extends nothing anyone relies on (``lease.HEARTBEAT_PG``). It extends the
    lease, and the setting ends with its transaction."""
    from sessions_app.store import DjangoSessionStore, lease, opening, wire

    turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
    DjangoSessionStore().create_turn_sync(
        SessionRef("ops", f"beat-{turn_id[:8]}"), TurnInput(text="x"), turn_id=turn_id
    )
    raw = _connect()
    try:
        assert opening.claim_and_load(raw, turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=30)
        raw.execute("BEGIN")
        batch = wire.Batch(raw)
        batch.add(lease.HEARTBEAT_PG, [600.0, turn_id, attempt, TurnStatus.RUNNING])
        assert batch.run()[0].ntuples == 1
        assert raw.execute("SHOW synchronous_commit").fetchone() == ("off",)
        raw.execute("COMMIT")
        assert raw.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert lease.heartbeat_direct(raw, turn_id, attempt_id=attempt, now=2.0, lease_seconds=900) is None
        assert raw.execute("SHOW synchronous_commit").fetchone() == ("on",)
    finally:
        raw.close()
        transcripts.clear()
    assert m.Turn.objects.get(pk=turn_id).lease_expires_at == 902.0
