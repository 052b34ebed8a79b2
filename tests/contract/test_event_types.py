"""``Event.type`` is a smallint code in the database and the type's name everywhere in Python
(``models.EventTypeField``): every runtime event type has a code that never changes, the
store's raw SQL writes the codes on both backends, the ORM filters and reads names, and a type
with no code is refused when it is written, never stored as a code that reads back as another."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import ClassVar

import pytest
from django.db import connection, transaction

from agents_app.runtime import Message, Role, SessionRef, TurnInput
from agents_app.runtime import events as ev
from sessions_app import models as m
from sessions_app.store.checkpoint import stored_ref
from tests.contract.units import unit_of

#: the codes rows already hold: a renumbering would make every stored event read as another
PINNED = {
    "turn.started": 1,
    "reasoning.delta": 2,
    "message.delta": 3,
    "message.completed": 4,
    "action.requested": 5,
    "action.completed": 6,
    "input.requested": 7,
    "input.answered": 8,
    "child.started": 9,
    "turn.completed": 10,
    "turn.failed": 11,
    "turn.cancelled": 12,
    "session.reset": 13,
    "compaction.started": 14,
    "compaction.completed": 15,
    "compaction.failed": 16,
    "branch.switched": 17,
}


@dataclass(frozen=True, slots=True)
class MadeUp(ev.TurnEvent):
    type: ClassVar[str] = "made.up"


def test_every_runtime_event_type_has_a_code_that_round_trips():
    field = m.Event._meta.get_field("type")
    assert set(ev.EVENT_TYPES) <= set(m.EVENT_TYPE_CODES)
    for name in ev.EVENT_TYPES:
        code = field.get_prep_value(name)
        assert isinstance(code, int) and -32768 <= code <= 32767
        assert field.from_db_value(code, None, connection) == name
        assert field.to_python(code) == name and field.to_python(name) == name
    assert len(set(m.EVENT_TYPE_CODES.values())) == len(m.EVENT_TYPE_CODES)


def test_the_codes_are_never_renumbered():
    assert {name: m.EVENT_TYPE_CODES[name] for name in PINNED} == PINNED


def test_an_unknown_type_is_refused_not_stored_as_a_code():
    field = m.Event._meta.get_field("type")
    for bad in ("made.up", "", 4):
        with pytest.raises(ValueError, match="unknown event type"):
            field.get_prep_value(bad)
    with pytest.raises(ValueError, match="unknown event type code"):
        field.from_db_value(999, None, connection)


def _claimed(key: str):
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", key), TurnInput(text="x"), turn_id=turn_id)
    store.claim_sync(turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=10)
    return store, turn_id, attempt


def _raw_types(turn_id: str) -> list:
    with connection.cursor() as cur:
        # the column's own form of the id (bytes on PostgreSQL: models.TurnRefField)
        cur.execute("SELECT type FROM sessions_app_event WHERE turn_id = %s ORDER BY seq", [stored_ref(turn_id)])
        return [row[0] for row in cur.fetchall()]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("direct", [False, True])
def test_the_store_writes_codes_and_the_orm_reads_names(direct):
    store, turn_id, attempt = _claimed(f"codes-{direct}")

    def work(tx):
        tx.append(Message(Role.ASSISTANT, text="done", turn_id=turn_id), 0)
        tx.emit(ev.MessageCompleted(turn_id, text="done", index=0))
        tx.emit(ev.TurnFailed(turn_id, error="boom", phase="model"))
        tx.emit(ev.CompactionFailed(turn_id, error="x"))

    commit = asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    names = ["message.completed", "turn.failed", "compaction.failed"]
    assert _raw_types(turn_id) == [m.EVENT_TYPE_CODES[n] for n in names]
    events = m.Event.objects.filter(turn_id=turn_id)
    assert list(events.order_by("seq").values_list("type", flat=True)) == names
    assert events.get(type="turn.failed").type == "turn.failed"
    assert events.filter(type__in=["turn.failed", "turn.completed"]).count() == 1
    assert not events.filter(type="turn.completed").exists()
    assert [e.event for e in store.events_sync(SessionRef("ops", f"codes-{direct}"))] == [
        e.event for e in commit.events
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("direct", [False, True])
def test_a_checkpoint_with_an_event_of_no_code_rolls_back_whole(direct):
    store, turn_id, attempt = _claimed(f"madeup-{direct}")

    def work(tx):
        tx.append(Message(Role.ASSISTANT, text="lost", turn_id=turn_id), 0)
        tx.emit(ev.MessageCompleted(turn_id, text="lost", index=0))
        tx.emit(MadeUp(turn_id))

    with pytest.raises(ValueError, match="made.up"):
        asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    assert not m.Message.objects.filter(turn_id=turn_id).exists()
    assert not m.Event.objects.filter(turn_id=turn_id).exists()


@pytest.mark.django_db(transaction=True)
def test_the_orm_refuses_an_unknown_type_at_write_time():
    s = m.Session.objects.create(agent="ops", key="orm-madeup")
    with pytest.raises(ValueError, match="unknown event type"), transaction.atomic():
        m.Event.objects.create(session=s, generation=0, seq=1, type="made.up", data={})
    created = m.Event.objects.create(session=s, generation=0, seq=1, type="turn.started", data={})
    assert m.Event.objects.get(pk=created.pk).type == "turn.started"
