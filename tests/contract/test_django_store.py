"""What only the Django store promises: O(1) loading, a sync tool's ORM writes share the
checkpoint's transaction, and the turn loop on a real database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents_app.runtime import Message, Role, SessionRef, TurnInput
from agents_app.runtime import events as ev
from sessions_app import models as m
from sessions_app.selectors import step_keys
from tests.contract.units import NullSink, unit_of

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
        assert len(state.transcript) == size and len(step_keys(turn_id)) == size
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

    store.atomic_sync(turn_id, attempt, lambda tx: Order.objects.create(item="committed"))
    assert list(Order.objects.values_list("item", flat=True)) == ["committed"]


def _claimed(key: str) -> tuple[object, str, str]:
    from sessions_app.store import DjangoSessionStore

    store = DjangoSessionStore()
    turn_id, attempt = uuid.uuid4().hex, uuid.uuid4().hex
    store.create_turn_sync(SessionRef("ops", key), TurnInput(text="x"), turn_id=turn_id)
    store.claim_sync(turn_id, owner="w", attempt_id=attempt, now=1.0, lease_seconds=10)
    return store, turn_id, attempt


def _note(turn_id: str, text: str):
    def work(tx):
        tx.append(Message(Role.USER, text=text, turn_id=turn_id), 0)
        tx.emit(ev.MessageCompleted(turn_id, text=text))

    return work


def test_a_unit_inside_an_enclosing_transaction_rolls_back_with_it():
    """The checkpoint commits its own transaction only: inside someone else's atomic block (the
    sweeper's, say) it must neither commit early nor end the enclosing transaction."""
    from django.db import transaction

    from sessions_app.models import Event
    from sessions_app.models import Message as MessageRow

    store, turn_id, attempt = _claimed("nested")
    with pytest.raises(ZeroDivisionError):
        with transaction.atomic():
            store.atomic_sync(turn_id, attempt, _note(turn_id, "undone"))  # nothing ran before it
            1 / 0
    assert not MessageRow.objects.filter(turn_id=turn_id).exists()
    assert not Event.objects.filter(turn_id=turn_id).exists()
    with transaction.atomic():
        store.get_turn_sync(turn_id)  # the enclosing transaction has begun
        store.atomic_sync(turn_id, attempt, _note(turn_id, "kept"))
        assert connection.in_atomic_block  # still inside it: the unit did not end it
    assert [m.data["text"] for m in MessageRow.objects.filter(turn_id=turn_id)] == ["kept"]


def test_a_stale_unit_rolls_back_the_tools_writes_and_leaves_the_connection_usable():
    from agents_app.models import Order
    from agents_app.runtime import StaleAttemptError
    from sessions_app.models import Message as MessageRow

    store, turn_id, attempt = _claimed("stale-tool")
    assert store.claim_sync(turn_id, owner="w2", attempt_id="other", now=100.0, lease_seconds=10)

    def tool_then_note(tx):
        Order.objects.create(item="written by a stale attempt")
        _note(turn_id, "stale")(tx)

    with pytest.raises(StaleAttemptError):
        store.atomic_sync(turn_id, attempt, tool_then_note)
    assert Order.objects.count() == 0 and not MessageRow.objects.filter(turn_id=turn_id).exists()
    store.atomic_sync(turn_id, "other", _note(turn_id, "owner"))  # the same connection goes on
    assert [m.data["text"] for m in MessageRow.objects.filter(turn_id=turn_id)] == ["owner"]


@pytest.mark.parametrize("uses", ["nothing", "a statement", "an on_commit hook"])
def test_a_sync_tools_step_commits_in_its_transaction_when_the_tool_used_the_connection(uses, monkeypatch):
    """A sync tool's unit writes its checkpoint in the tool's transaction, on Django's
    connection, when the tool used that connection: its statements' writes, and the hooks it
    left for the commit (``transaction.on_commit``), wait for the step. A tool that used nothing
    of it has nothing to commit there: its step is written as a plain unit, from the caller's
    thread (``toolsql``). Either way the step is written once, the hook runs after it."""
    import asyncio

    from django.db import transaction

    from sessions_app.models import Message as MessageRow
    from sessions_app.store import DjangoSessionStore

    store, turn_id, attempt = _claimed(f"uses-{uses}")
    inside: list[str] = []
    write_sync = DjangoSessionStore._write_sync
    monkeypatch.setattr(
        DjangoSessionStore, "_write_sync", lambda self, tx: inside.append(tx.turn_id) or write_sync(self, tx)
    )
    hooked: list[bool] = []

    def tool(tx):
        if uses == "a statement":
            m.Session.objects.exists()
        elif uses == "an on_commit hook":
            transaction.on_commit(lambda: hooked.append(MessageRow.objects.filter(turn_id=turn_id).exists()))
        _note(turn_id, "noted")(tx)

    commit = asyncio.run(store.atomic(turn_id, attempt, tool))
    assert inside == ([] if uses == "nothing" else [turn_id])
    assert hooked == ([True] if uses == "an on_commit hook" else [])
    assert [e.event.type for e in commit.events] == ["message.completed"]
    assert [r.data["text"] for r in MessageRow.objects.filter(turn_id=turn_id)] == ["noted"]


@pytest.mark.parametrize("uses", ["nothing", "the ORM"])
def test_a_turns_heartbeat_does_not_wait_for_its_sync_tool(uses):
    """A sync tool holds the thread that owns Django's connection for its whole run (an HTTP
    call, say); its turn's heartbeat runs meanwhile on the store's own connection, so a tool
    that runs past the lease does not lose it. PostgreSQL: whatever the tool sent (its own writes
    lock only their rows). SQLite: unless the tool used the ORM, whose unit holds the database's
    one write lock until its step commits; that heartbeat waits for the commit."""
    import asyncio
    import threading

    from agents_app.models import Order
    from sessions_app.models import Turn

    store, turn_id, attempt = _claimed(f"beat-{uses}")
    started, release = threading.Event(), threading.Event()

    def tool(tx):
        if uses == "the ORM":
            Order.objects.create(item="written before the wait")
        started.set()
        assert release.wait(10), "the test never let the tool finish"
        _note(turn_id, "noted")(tx)

    waits = uses == "the ORM" and connection.vendor == "sqlite"

    async def go():
        unit = asyncio.create_task(store.atomic(turn_id, attempt, tool))
        while not started.is_set():
            await asyncio.sleep(0.001)
        beat = asyncio.create_task(store.heartbeat(turn_id, attempt_id=attempt, now=50.0, lease_seconds=10))
        await asyncio.wait({beat}, timeout=0.5 if waits else 10)
        during = beat.done()
        release.set()
        await unit
        return during, await beat

    during, reason = asyncio.run(go())
    assert during is not waits and reason is None
    assert Turn.objects.get(pk=turn_id).lease_expires_at == 60.0
    assert Order.objects.count() == (1 if uses == "the ORM" else 0)


def test_a_sync_tool_that_runs_past_the_lease_keeps_it():
    """A turn whose sync tool runs for two and a half leases (a slow HTTP call) keeps its
    attempt: its heartbeats go on meanwhile, so another worker asking for the turn at twice the
    lease is refused, and the tool runs once, in one attempt."""
    import asyncio
    import threading
    import time

    from agents_app.runtime import Agent, ScriptedModel, TurnExecutor, TurnStatus, reply, tool
    from sessions_app.models import Turn
    from sessions_app.store import DjangoSessionStore

    lease = 1.0  # a heartbeat every third of it: a loaded machine has slack
    runs: list[int] = []

    @tool("slow", "waits on the network", {"type": "object"})
    def slow(input, ctx):
        runs.append(threading.get_ident())
        time.sleep(2.5 * lease)
        return {"ok": True}

    store, agent = DjangoSessionStore(), Agent("slow", "You wait.", tools=[slow])
    model = ScriptedModel([reply("", ("slow", {})), reply("done")])

    def worker(owner: str) -> TurnExecutor:
        return TurnExecutor(
            store=store,
            sink=NullSink(),
            agent_for=lambda name: agent,
            model_for=lambda a: model,
            clock=time.time,
            owner=owner,
            lease_seconds=lease,
        )

    turn_id = uuid.uuid4().hex

    async def go():
        await store.create_turn(SessionRef("slow", "past-the-lease"), TurnInput(text="wait"), turn_id=turn_id)
        driving = asyncio.create_task(worker("first").drive(turn_id))
        while not runs:
            await asyncio.sleep(0.01)
        await asyncio.sleep(2 * lease)
        taken = await worker("second").drive(turn_id)
        return taken, await driving

    taken, status = asyncio.run(go())
    turn = Turn.objects.get(pk=turn_id)
    assert taken is None and status == TurnStatus.COMPLETED
    assert len(runs) == 1 and turn.attempts == 1 and turn.lease_owner == "first"


def test_a_deferred_journal_lands_before_the_next_checkpoint():
    """PostgreSQL: provider_started is sent on the store's own connection without waiting; the
    next unit on that connection reads its answer. Elsewhere it is written at once."""
    import asyncio

    from agents_app.runtime import Phase
    from sessions_app.models import Turn

    store, turn_id, attempt = _claimed("journal")

    async def go():
        await store.journal(turn_id, attempt, Phase.PROVIDER_STARTED, stream_key="k1")
        await store.commit(turn_id, attempt, _note(turn_id, "after"))

    asyncio.run(go())
    turn = Turn.objects.get(pk=turn_id)
    assert turn.phase == "provider_started" and turn.journal == {"stream_key": "k1", "attempt_id": attempt}
    assert turn.revision == 3  # claim, journal, checkpoint: the journal landed before the unit


@pytest.mark.parametrize("direct", [False, True])
def test_the_event_log_refers_to_the_transcript_instead_of_repeating_it(direct):
    """A reply, a call and a result are stored once (in the transcript); their events keep the
    message's position and are whole again when the log is read."""
    import asyncio

    from agents_app.runtime import ToolCall
    from sessions_app.models import Event

    store, turn_id, attempt = _claimed(f"dedupe-{direct}")
    big = "a long reply " * 400
    call = ToolCall("c1", "lookup", {"q": big})

    def work(tx):
        tx.append(Message(Role.ASSISTANT, text=big, turn_id=turn_id, tool_calls=(call,)), 0)
        tx.emit(ev.MessageCompleted(turn_id, text=big, index=0))
        tx.emit(ev.ActionRequested(turn_id, call=call.to_json()))
        tx.append(Message(Role.TOOL, turn_id=turn_id, call_id="c1", name="lookup", result={"r": big}), 1)
        tx.emit(ev.ActionCompleted(turn_id, call_id="c1", name="lookup", result={"r": big}))
        tx.emit(ev.ActionCompleted(turn_id, call_id="c9", name="other", result="held by no message"))

    commit = asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    stored = list(Event.objects.filter(turn_id=turn_id).order_by("seq").values_list("data", flat=True))
    assert stored[:3] == [0, 0, 1]  # a bare reference: the message's position alone
    assert stored[3]["result"] == "held by no message"  # the message's only call (stored[1]): not named
    assert all(big not in str(d) for d in stored)
    replayed = store.events_sync(SessionRef("ops", f"dedupe-{direct}"))
    assert [e.event for e in replayed] == [e.event for e in commit.events]
    assert replayed[0].event.text == big and replayed[2].event.result == {"r": big}


@pytest.mark.parametrize("direct", [False, True])
def test_an_event_row_keeps_only_what_its_columns_and_message_do_not_hold(direct):
    """The type and turn id are columns; what an event shares with the message it refers to is
    read back from it. A result under another name, an error, an event of another turn id keep
    theirs, and the log replays every event whole."""
    import asyncio

    from sessions_app.models import Event

    store, turn_id, attempt = _claimed(f"slim-{direct}")

    def work(tx):
        tx.append(Message(Role.ASSISTANT, text="done", turn_id=turn_id), 0)
        tx.emit(ev.MessageCompleted(turn_id, text="done", index=0))
        tx.append(Message(Role.TOOL, turn_id=turn_id, call_id="c1", name="lookup", result={"r": 1}), 1)
        tx.emit(ev.ActionCompleted(turn_id, call_id="c1", name="lookup", result={"r": 1}))
        tx.emit(ev.ActionCompleted(turn_id, call_id="c1", name="renamed", result={"r": 1}, error="late"))
        tx.emit(ev.TurnCompleted("", text="x"))
        tx.emit(ev.TurnCompleted(turn_id, text="done"))  # the reply of the unit's assistant message

    commit = asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    rows = list(Event.objects.filter(turn_id=turn_id).order_by("seq").values_list("type", "data"))
    assert rows == [
        ("message.completed", 0),
        ("action.completed", 1),
        ("action.completed", {"$from": 1, "name": "renamed", "error": "late"}),
        ("turn.completed", {"text": "x", "turn_id": ""}),
        ("turn.completed", 0),
    ]
    replayed = store.events_sync(SessionRef("ops", f"slim-{direct}"))
    assert [e.event for e in replayed] == [e.event for e in commit.events]


@pytest.mark.parametrize("direct", [False, True])
def test_an_action_requested_names_its_call_when_its_message_made_several(direct):
    import asyncio

    from agents_app.runtime import ToolCall
    from sessions_app.models import Event

    store, turn_id, attempt = _claimed(f"calls-{direct}")
    calls = (ToolCall("c1", "lookup", {"q": 1}), ToolCall("c2", "lookup", {"q": 2}))

    def work(tx):
        tx.append(Message(Role.ASSISTANT, turn_id=turn_id, tool_calls=calls), 0)
        for call in reversed(calls):
            tx.emit(ev.ActionRequested(turn_id, call=call.to_json()))

    commit = asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    assert list(Event.objects.filter(turn_id=turn_id).order_by("seq").values_list("data", flat=True)) == [
        {"$from": 0, "$call": "c2"},
        {"$from": 0, "$call": "c1"},
    ]
    replayed = store.events_sync(SessionRef("ops", f"calls-{direct}"))
    assert [e.event for e in replayed] == [e.event for e in commit.events]
    assert [e.event.call["id"] for e in replayed] == ["c2", "c1"]


@pytest.mark.parametrize("direct", [False, True])
def test_an_event_that_refers_to_a_message_is_committed_at_its_messages_time(direct):
    import asyncio

    from sessions_app.models import Event
    from sessions_app.selectors import events_since

    store, turn_id, attempt = _claimed(f"times-{direct}")

    def work(tx):
        tx.append(Message(Role.ASSISTANT, text="done", turn_id=turn_id), 0)
        tx.emit(ev.MessageCompleted(turn_id, text="done", index=0))
        tx.emit(ev.TurnFailed(turn_id, error="held by no message"))

    asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    stored = list(Event.objects.filter(turn_id=turn_id).order_by("seq").values_list("created_at", flat=True))
    assert stored[0] is None and stored[1] is not None
    message_at = m.Message.objects.get(turn_id=turn_id, index=0).created_at
    assert stored[1] == message_at  # one checkpoint, one time
    frames = events_since(agent="ops", key=f"times-{direct}", after=0)
    assert [f["at"] for f in frames] == [message_at.isoformat()] * 2


def test_a_bare_reference_and_the_object_written_before_replay_and_time_the_same():
    """A reference alone is stored as the message's position (``2``); rows written before keep
    ``{"$from": 2}``: the log replays both whole, and both take their message's time."""
    from sessions_app.models import Event, Session
    from sessions_app.selectors import events_since
    from sessions_app.store import eventlog

    store, turn_id, attempt = _claimed("bare")
    session = Session.objects.get(key="bare")
    message = m.Message.objects.create(
        session=session,
        generation=session.generation,
        index=0,
        turn_id=turn_id,
        role="assistant",
        data={"text": "done"},
    )
    for seq, data in ((1, 0), (2, {"$from": 0})):
        Event.objects.create(
            session=session,
            generation=session.generation,
            seq=seq,
            turn_id=turn_id,
            type="message.completed",
            data=data,
        )
    Event.objects.filter(session=session).update(created_at=None)
    assert list(Event.objects.filter(session=session).order_by("seq").values_list("data", flat=True)) == [
        0,
        {"$from": 0},
    ]
    assert [eventlog.refers(d) for d in (0, {"$from": 0}, {"text": "x"})] == [True, True, False]
    replayed = [e.event for e in store.events_sync(SessionRef("ops", "bare"))]
    assert replayed == [ev.MessageCompleted(turn_id, text="done", index=0)] * 2
    assert [f["at"] for f in events_since(agent="ops", key="bare", after=0)] == [message.created_at.isoformat()] * 2


def test_event_rows_written_whole_before_still_replay_as_written():
    from sessions_app.models import Event, Session
    from sessions_app.store import eventlog

    store, turn_id, attempt = _claimed("whole-rows")
    session = Session.objects.get(key="whole-rows")
    m.Message.objects.create(
        session=session,
        generation=session.generation,
        index=0,
        turn_id=turn_id,
        role="tool",
        data={"role": "tool", "call_id": "c1", "name": "lookup", "result": 5},
    )
    old = {"type": "action.completed", "turn_id": turn_id, "call_id": "c1", "name": "other", "error": None, "$from": 0}
    Event.objects.create(
        session=session, generation=session.generation, seq=1, turn_id=turn_id, type="action.completed", data=old
    )
    [whole] = eventlog.restore([(session.pk, session.generation, "action.completed", turn_id, old)])
    assert whole == {
        "type": "action.completed",
        "turn_id": turn_id,
        "call_id": "c1",
        "name": "other",
        "error": None,
        "result": 5,
    }
    assert [e.event for e in store.events_sync(SessionRef("ops", "whole-rows"))] == [
        ev.ActionCompleted(turn_id, call_id="c1", name="other", result=5)
    ]


@pytest.mark.parametrize("direct", [False, True])
def test_a_step_pointing_at_its_units_message_is_that_messages_row(direct):
    """No Step row for a step whose result is a message of its unit: the message row carries
    its key. A step holding data, or pointing at no message of its unit, stays a Step row. The
    load sees every one of them."""
    import asyncio

    store, turn_id, attempt = _claimed(f"fold-{direct}")

    def work(tx):
        tx.append(Message(Role.ASSISTANT, text="a", turn_id=turn_id), 0)
        tx.step("model:0", 0)
        tx.append(Message(Role.TOOL, turn_id=turn_id, call_id="c1", name="t", result=1), 1)
        tx.step("tool:0:c1", 1)
        tx.step("again:1", 1)  # a second step at the same message
        tx.step("compact:9", 1, {"boundary": 1})
        tx.step("elsewhere", 7)

    asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    folded = list(m.Message.objects.filter(turn_id=turn_id).order_by("index").values_list("index", "step"))
    assert folded == [(0, "model:0"), (1, "tool:0:c1")]
    rows = sorted(m.Step.objects.filter(turn_id=turn_id).values_list("key", "message_index", "data"))
    assert rows == [("again:1", 1, None), ("compact:9", 1, {"boundary": 1}), ("elsewhere", 7, None)]
    assert store.load_sync(turn_id).steps == {"model:0", "tool:0:c1", "again:1", "compact:9", "elsewhere"}
    assert sorted(step_keys(turn_id)) == ["again:1", "compact:9", "elsewhere", "model:0", "tool:0:c1"]


@pytest.mark.parametrize("direct", [False, True])
def test_a_folded_step_is_recorded_once(direct):
    """The same step written again, on another message, is refused by the checkpoint's guard
    (``checkpoint.STEP_HELD``: the turn's messages from its opening hold it already) and its
    unit rolls back whole."""
    import asyncio

    store, turn_id, attempt = _claimed(f"once-{direct}")

    def first(tx):
        tx.append(Message(Role.TOOL, turn_id=turn_id, call_id="c1", name="t", result=1), 0)
        tx.step("tool:0:c1", 0)

    def replayed(tx):
        tx.append(Message(Role.TOOL, turn_id=turn_id, call_id="c1", name="t", result=1), 1)
        tx.step("tool:0:c1", 1)
        tx.emit(ev.TurnCompleted(turn_id, text="x"))

    run = unit_of(store, direct)
    asyncio.run(run(turn_id, attempt, first))
    with pytest.raises(Exception) as refused:
        asyncio.run(run(turn_id, attempt, replayed))
    assert "step" in str(refused.value) and "already recorded" in str(refused.value)
    assert list(m.Message.objects.filter(turn_id=turn_id).values_list("index", flat=True)) == [0]
    assert not m.Event.objects.filter(turn_id=turn_id, type="turn.completed").exists()


@pytest.mark.parametrize("direct", [False, True])
def test_a_step_folded_twice_in_one_unit_is_refused(direct):
    """One unit that writes the same step on two of its messages writes nothing."""
    import asyncio

    store, turn_id, attempt = _claimed(f"twice-{direct}")

    def twice(tx):
        for i in (0, 1):
            tx.append(Message(Role.TOOL, turn_id=turn_id, call_id="c1", name="t", result=i), i)
            tx.step("tool:0:c1", i)

    with pytest.raises(Exception) as refused:
        asyncio.run(unit_of(store, direct)(turn_id, attempt, twice))
    assert "already recorded" in str(refused.value)
    assert not m.Message.objects.filter(turn_id=turn_id).exists()


@pytest.mark.parametrize("direct", [False, True])
def test_a_message_row_keeps_its_json_less_what_its_columns_hold(direct):
    """The role and the writer's turn id are columns; a message of another turn id, or of none,
    keeps its own. Rows written whole before read the same. The load gets every message whole."""
    import asyncio

    store, turn_id, attempt = _claimed(f"rows-{direct}")
    mine = Message(Role.ASSISTANT, text="a", turn_id=turn_id)
    other = Message(Role.USER, text="b", turn_id="another")
    nobody = Message(Role.TRIGGER, text="c", by="cron")

    def work(tx):
        for i, message in enumerate((mine, other, nobody)):
            tx.append(message, i)

    asyncio.run(unit_of(store, direct)(turn_id, attempt, work))
    session = m.Session.objects.get(key=f"rows-{direct}")
    whole = Message(Role.TOOL, turn_id="old", call_id="c", name="t", result={"x": None, "y": 0.30000000000000004})
    m.Message.objects.create(
        session=session, generation=session.generation, index=3, turn_id=turn_id, role="tool", data=whole.to_json()
    )  # as written before
    rows = list(m.Message.objects.filter(session=session).order_by("index").values_list("role", "turn_id", "data"))
    assert rows[:3] == [
        ("assistant", turn_id, {"text": "a"}),
        ("user", turn_id, {"text": "b", "turn_id": "another"}),
        ("trigger", turn_id, {"text": "c", "by": "cron", "turn_id": None}),
    ]
    assert store.load_sync(turn_id).transcript == [mine, other, nobody, whole]
