"""A checkpoint's unit on PostgreSQL opens with ONE statement (``unit_sql.unit_statement``): the
session's row, the fence, the step guard, the messages and the events. PostgreSQL runs its
data-modifying parts in no promised order, so the guard and the inserts read the fence's row:
a fenced attempt raises JUNE1 and writes nothing, even when its step is recorded too; a step
recorded twice raises JUNE3 and writes nothing; the events stay numbered without gaps."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.db import IntegrityError, connections

from agents_app.runtime import Message, Role, SessionRef, StaleAttemptError, TurnInput
from agents_app.runtime import events as ev
from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from sessions_app.store import checkpoint_pg, transcripts
from tests.conftest import is_postgres

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skipif("not is_postgres()")]


def _connect() -> psycopg.Connection:
    params = connections["default"].get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)


@pytest.fixture
def raw():
    conn = _connect()
    yield conn
    conn.close()
    transcripts.clear()


def _claimed(raw: psycopg.Connection, key: str, known: bool) -> tuple[str, str, m.Session]:
    from sessions_app.store import DjangoSessionStore, opening

    turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
    DjangoSessionStore().create_turn_sync(SessionRef("ops", key), TurnInput(text="x"), turn_id=turn_id)
    assert opening.claim_and_load(raw, turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=30)
    if not known:
        transcripts.clear()
    return turn_id, attempt, m.Session.objects.get(key=key)


def _unit(raw, turn_id, attempt, index, step, changes=None, events=1):
    message = Message(Role.ASSISTANT, text=f"m{index}", turn_id=turn_id)
    return checkpoint_pg.write_postgresql(
        raw,
        turn_id,
        attempt,
        changes or {"phase": "x"},
        [(index, message)],
        [(step, index, None)],
        [ev.MessageCompleted(turn_id, text=f"m{index}") for _ in range(events)],
    )


def _written(session: m.Session) -> tuple:
    session.refresh_from_db()
    messages = list(m.Message.objects.filter(session=session).order_by("index").values_list("index", "step"))
    events = list(m.Event.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))
    return session.event_seq, messages, events


@pytest.mark.parametrize("known", [True, False])
def test_a_units_fence_guard_messages_and_events_are_one_statement(raw, known):
    """A unit that leaves the session's status as it is sent three statements (the numbering
    with its events, the fence, the guard with the messages); now one, and one settling unit
    two (that one, then the status recomputed with its events)."""
    turn_id, attempt, session = _claimed(raw, f"one-{known}", known)
    message = [(0, Message(Role.ASSISTANT, text="a", turn_id=turn_id))]
    event = [ev.MessageCompleted(turn_id, text="a")]
    unit = next(checkpoint_pg.write_steps(turn_id, attempt, {"phase": "x"}, message, [("model:0", 0, None)], event))
    assert len(unit.commands) == 1
    settling = next(checkpoint_pg.write_steps(turn_id, attempt, {"status": TurnStatus.COMPLETED}, message, [], event))
    assert len(settling.commands) == 2
    written = _unit(raw, turn_id, attempt, 0, "model:0")
    assert (written.session_id, written.generation) == (session.pk, 0)
    assert [e.seq for e in written.events] == [1]
    assert _written(session) == (1, [(0, "model:0")], [1])


@pytest.mark.parametrize("known", [True, False])
@pytest.mark.parametrize("settles", [False, True])
def test_a_fenced_attempt_whose_step_is_recorded_too_fails_with_june1_and_writes_nothing(raw, known, settles):
    """The guard reads the fence's row: a fenced attempt's unit finds no row to guard and
    raises JUNE1 (stale), not JUNE3 (recorded), although its step is recorded; nothing of it
    is written, its events unnumbered."""
    from sessions_app.store import opening

    turn_id, attempt, session = _claimed(raw, f"stale-{known}-{settles}", known)
    _unit(raw, turn_id, attempt, 0, "model:0")
    before = _written(session)
    taker = uuid.uuid4().hex  # the lease ran out: another attempt took the turn
    assert opening.claim_and_load(raw, turn_id, owner="v", attempt_id=taker, now=1e9, lease_seconds=30)
    if not known:
        transcripts.clear()
    changes = {"status": TurnStatus.COMPLETED, "text": "x"} if settles else None
    with pytest.raises(StaleAttemptError):
        _unit(raw, turn_id, attempt, 1, "model:0", changes)
    assert _written(session) == before
    assert m.Turn.objects.get(pk=turn_id).attempt_id == taker


@pytest.mark.parametrize("known", [True, False])
@pytest.mark.parametrize("settles", [False, True])
def test_a_step_recorded_twice_fails_with_june3_and_writes_nothing(raw, known, settles):
    """The live attempt's unit that folds a step the turn's messages hold already raises JUNE3:
    no message, no event, no move of the turn's row or the session's numbering."""
    turn_id, attempt, session = _claimed(raw, f"twice-{known}-{settles}", known)
    _unit(raw, turn_id, attempt, 0, "model:0")
    before = _written(session)
    revision = m.Turn.objects.get(pk=turn_id).revision
    changes = {"status": TurnStatus.COMPLETED, "text": "x"} if settles else None
    with pytest.raises(IntegrityError, match="already recorded"):
        _unit(raw, turn_id, attempt, 1, "model:0", changes)
    assert _written(session) == before
    turn = m.Turn.objects.get(pk=turn_id)
    assert turn.revision == revision and turn.status == TurnStatus.RUNNING
    # the next step goes on, numbered after the last committed event
    _unit(raw, turn_id, attempt, 1, "model:1", events=10)
    assert _written(session) == (11, [(0, "model:0"), (1, "model:1")], list(range(1, 12)))
