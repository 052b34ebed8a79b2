"""What only the Django store promises: O(1) loading, a sync tool's ORM writes share the
checkpoint's transaction, and the turn loop on a real database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents_app.runtime import Message, Role, SessionRef, TurnInput
from agents_app.runtime import events as ev

pytestmark = pytest.mark.django_db(transaction=True)


def test_loading_costs_the_same_queries_at_any_length():
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    ref = SessionRef("ops", "o1")
    counts = []
    for size in (2, 200):
        turn_id = uuid.uuid4().hex
        store.create_turn_sync(SessionRef("ops", f"o{size}"), TurnInput(text="x"), turn_id=turn_id)
        attempt = uuid.uuid4().hex
        store.claim_sync(turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=10)

        def work(tx, size=size, turn_id=turn_id):
            for i in range(size):
                tx.append(Message(Role.USER, text=f"m{i}", turn_id=turn_id), i)
                tx.step(f"model:{i}", i)
                tx.emit(ev.MessageCompleted(turn_id, text=f"m{i}"))

        store.atomic_sync(turn_id, attempt, work)
        with CaptureQueriesContext(connection) as ctx:
            state = store.load_sync(turn_id)
        assert len(state.transcript) == size and len(state.steps) == size
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1] <= 4
    del ref


def test_a_sync_tools_writes_roll_back_with_its_unit():
    from agents_app.models import Order
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", "rb"), TurnInput(text="x"), turn_id=turn_id)
    store.claim_sync(turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=10)

    def work(tx):
        Order.objects.create(item="kept only if the unit commits")
        raise RuntimeError("crash before the checkpoint")

    with pytest.raises(RuntimeError):
        store.atomic_sync(turn_id, attempt, work)
    assert Order.objects.count() == 0

    def savepointed(tx):
        try:
            tx.savepoint(lambda: (Order.objects.create(item="undone"), 1 / 0))
        except ZeroDivisionError:
            pass
        Order.objects.create(item="committed")

    store.atomic_sync(turn_id, attempt, savepointed)
    assert list(Order.objects.values_list("item", flat=True)) == ["committed"]
