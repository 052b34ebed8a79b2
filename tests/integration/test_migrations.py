"""Migrations 0009 (steps folded into their messages), 0010 (messages and events keyed by
their position), 0012-0013 (an event's JSON as text; a message's only call not named) and
0014-0015 (an event that refers to a message keeps no time of its own), 0017 (an event's type
as a code), 0018 (PostgreSQL: the columns packed) and 0019 (a row's turn id in 17 bytes, a
turn's opening, an event's seq an int4) keep the rows a database already holds, forwards and
backwards."""

from __future__ import annotations

import importlib

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from agents_app.runtime import Message, Role, SessionRef
from agents_app.runtime import events as ev

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("sessions_app", "0008_opening")]


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def latest():
    return [key for key in MigrationExecutor(connection).loader.graph.leaf_nodes() if key[0] == "sessions_app"]


def old_rows(apps) -> None:
    """A session as 0008 stored it: whole message JSON, a Step row a step, whole events."""
    Session, Turn = apps.get_model("sessions_app", "Session"), apps.get_model("sessions_app", "Turn")
    Message_, Step, Event = (apps.get_model("sessions_app", n) for n in ("Message", "Step", "Event"))
    s = Session.objects.create(agent="ops", key="old", event_seq=2, status="idle")
    Turn.objects.create(id="t1", session=s, status="completed")
    Message_.objects.create(session=s, generation=0, index=0, turn_id="t1", role="user",
                            data={"role": "user", "text": "hi", "turn_id": "t1"})
    Message_.objects.create(session=s, generation=0, index=1, turn_id="t1", role="assistant",
                            data={"role": "assistant", "text": "hello", "turn_id": "t1"})
    Step.objects.create(turn_id="t1", key="model:1", message_index=1)
    Event.objects.create(session=s, generation=0, seq=1, turn_id="t1", type="turn.started",
                         data={"type": "turn.started", "turn_id": "t1", "trigger": "inbound", "$from": 0})
    Event.objects.create(session=s, generation=0, seq=2, turn_id="t1", type="turn.completed",
                         data={"type": "turn.completed", "turn_id": "t1", "text": "hello"})


def test_the_rows_a_database_holds_survive_both_migrations_both_ways():
    from sessions_app import models as m
    from sessions_app.selectors import step_keys
    from sessions_app.store import DjangoSessionStore, reads

    target = latest()
    try:
        old_rows(migrate(BEFORE))
        migrate(target)
        store = DjangoSessionStore()
        s = m.Session.objects.get(key="old")
        assert [(e.seq, e.event) for e in store.events_sync(SessionRef("ops", "old"))] == [
            (1, ev.TurnStarted("t1", trigger="inbound", text="hi")), (2, ev.TurnCompleted("t1", text="hello"))]
        assert m.Turn.objects.get(pk="t1").opening == 0  # 0019: found from its messages
        with connection.cursor() as cur:
            cur.execute(reads.STEPS_PG if connection.vendor == "postgresql" else reads.STEPS, ["t1", "t1"])
            assert cur.fetchall() == [("model:1", None)]
        # rows written now: keyed by position, the step in the message row
        m.Message.objects.create(session=s, generation=0, index=2, turn_id="t1", role="tool", step="tool:1:c",
                                 data={"call_id": "c", "name": "t", "result": 1})
        assert m.Message.objects.get(pk=(s.pk, 0, 2)).step == "tool:1:c"
        assert sorted(step_keys("t1")) == ["model:1", "tool:1:c"]
        with pytest.raises(IntegrityError), transaction.atomic():
            m.Message.objects.create(session=s, generation=0, index=2, turn_id="t1", role="tool", data={})
        # a step recorded once: the checkpoint's guard since 0019 (tests/contract/test_django_store.py)

        apps = migrate(BEFORE)  # backwards: ids again, the folded step a Step row again
        Message_, Step, Event = (apps.get_model("sessions_app", n) for n in ("Message", "Step", "Event"))
        rows = list(Message_.objects.filter(session_id=s.pk).order_by("index").values_list("id", "index", "role"))
        assert [(i, r) for _, i, r in rows] == [(0, "user"), (1, "assistant"), (2, "tool")]
        assert len({pk for pk, _, _ in rows}) == 3 and all(pk is not None for pk, _, _ in rows)
        assert sorted(Step.objects.filter(turn_id="t1").values_list("key", "message_index")) == [
            ("model:1", 1), ("tool:1:c", 2)]
        assert list(Event.objects.filter(session_id=s.pk).order_by("seq").values_list("seq", flat=True)) == [1, 2]
        with pytest.raises(IntegrityError), transaction.atomic():  # message_position is back
            Message_.objects.create(session_id=s.pk, generation=0, index=2, role="tool", data={})
        created = Message_.objects.create(session_id=s.pk, generation=0, index=3, role="tool", data={})
        assert created.id not in {pk for pk, _, _ in rows}
    finally:
        migrate(target)  # forwards again: the unfolded step stays a Step row, and still counts
    assert m.Message.objects.filter(session__key="old").count() == 4
    assert sorted(step_keys("t1")) == ["model:1", "tool:1:c"]
    assert m.Message.objects.get(session__key="old", index=1).data == {
        "role": "assistant", "text": "hello", "turn_id": "t1"}
    loaded = reads.messages_of
    with connection.cursor() as cur:
        cur.execute(reads.TRANSCRIPT_PG if connection.vendor == "postgresql" else reads.TRANSCRIPT,
                    [m.Session.objects.get(key="old").pk, 0, 0])
        array = cur.fetchone()[0] if connection.vendor == "postgresql" else f"[{','.join(r[0] for r in cur.fetchall())}]"
    assert loaded(array)[:2] == [Message(Role.USER, text="hi", turn_id="t1"),
                                 Message(Role.ASSISTANT, text="hello", turn_id="t1")]


BEFORE_TEXT = [("sessions_app", "0011_message_json_text")]  # before 0012 and 0013


def test_event_rows_keep_their_json_and_a_single_call_is_named_again_on_the_way_back():
    """0012-0013: event JSON cast to text on PostgreSQL and back; rows of either shape replay
    the same events; backwards, an ``action.requested`` that does not name its message's only
    call gets the ``"$call"`` the code of before reads."""
    from sessions_app import models as m
    from sessions_app.store import DjangoSessionStore

    target = latest()
    call = {"id": "c1", "name": "lookup", "input": {"q": 1}}
    whole = [(1, ev.TurnStarted("t1", text="hi")), (2, ev.ActionRequested("t1", call=call)),
             (3, ev.ActionCompleted("t1", call_id="c1", name="lookup", result={"r": 2})),
             (4, ev.TurnFailed("t1", error="boom", phase="tool"))]
    stored = [{"$from": 0, "trigger": "inbound"}, {"$call": "c1", "$from": 1}, {"$from": 2},
              {"error": "boom", "phase": "tool", "step": None}]
    try:
        apps = migrate(BEFORE_TEXT)
        Session, Turn = apps.get_model("sessions_app", "Session"), apps.get_model("sessions_app", "Turn")
        Message_, Event = apps.get_model("sessions_app", "Message"), apps.get_model("sessions_app", "Event")
        s = Session.objects.create(agent="ops", key="texts", event_seq=4, status="idle")
        Turn.objects.create(id="t1", session=s, status="failed")
        for index, role, data in [(0, "user", {"text": "hi"}), (1, "assistant", {"tool_calls": [call]}),
                                  (2, "tool", {"call_id": "c1", "name": "lookup", "result": {"r": 2}})]:
            Message_.objects.create(session=s, generation=0, index=index, turn_id="t1", role=role, data=data)
        for (seq, e), data in zip(whole, stored):
            Event.objects.create(session=s, generation=0, seq=seq, turn_id="t1", type=e.type, data=data)
        migrate(target)
        rows = lambda: list(m.Event.objects.filter(session_id=s.pk).order_by("seq").values_list("data", flat=True))
        assert rows() == stored
        replayed = lambda: [(e.seq, e.event) for e in DjangoSessionStore().events_sync(SessionRef("ops", "texts"))]
        assert replayed() == whole
        m.Event.objects.filter(session_id=s.pk, seq=2).update(data=1)  # as written now: a bare reference
        assert replayed() == whole

        apps = migrate(BEFORE_TEXT)
        Event = apps.get_model("sessions_app", "Event")
        assert list(Event.objects.filter(session_id=s.pk).order_by("seq").values_list("data", flat=True)) == stored
        if connection.vendor == "postgresql":  # jsonb again
            assert Event.objects.filter(session_id=s.pk, data__has_key="$call").count() == 1
    finally:
        migrate(target)
    assert replayed() == whole


BEFORE_TIME = [("sessions_app", "0013_event_call_implied")]  # before 0014 and 0015


def test_an_event_without_a_time_of_its_own_gets_its_messages_on_the_way_back():
    from sessions_app import models as m
    from sessions_app.selectors import events_since

    target = latest()
    s = m.Session.objects.create(agent="ops", key="times", event_seq=2, status="idle")
    m.Turn.objects.create(id="t1", session=s, status="completed")
    message = m.Message.objects.create(session=s, generation=0, index=0, turn_id="t1", role="user",
                                       data={"text": "hi"})
    m.Event.objects.create(session=s, generation=0, seq=1, turn_id="t1", type="turn.started",
                           data={"$from": 0, "trigger": "inbound"})
    m.Event.objects.filter(session=s, seq=1).update(created_at=None)  # as a checkpoint writes it now
    m.Event.objects.create(session=s, generation=0, seq=2, turn_id="t1", type="turn.completed",
                           data={"text": "bye"})
    own = m.Event.objects.get(session=s, seq=2).created_at
    assert [f["at"] for f in events_since(agent="ops", key="times", after=0)] == [
        message.created_at.isoformat(), own.isoformat()]
    try:
        apps = migrate(BEFORE_TIME)
        Event = apps.get_model("sessions_app", "Event")
        assert list(Event.objects.filter(session_id=s.pk).order_by("seq").values_list("created_at", flat=True)) == [
            message.created_at, own]
    finally:
        migrate(target)
    assert [f["at"] for f in events_since(agent="ops", key="times", after=0)] == [
        message.created_at.isoformat(), own.isoformat()]


BEFORE_CODES = [("sessions_app", "0016_turn_chain")]  # before 0017 and 0018
AT_0018 = [("sessions_app", "0018_pack_columns")]

#: what 0018 must keep of each table it rebuilds: its key, ``message_step``, the foreign key
SHAPE_PG = (
    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
    "UNION ALL SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass "
    "ORDER BY 1"
)
COLUMNS_PG = ("SELECT attname, format_type(atttypid, atttypmod), attnotnull FROM pg_attribute "
              "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum")


def _shape(table: str) -> tuple[list, set, list]:
    """(constraints and indexes, columns with their types but ``type``'s, the columns' order)."""
    with connection.cursor() as cur:
        cur.execute(SHAPE_PG, [table, table])
        constraints = cur.fetchall()
        cur.execute(COLUMNS_PG, [table])
        columns = cur.fetchall()
    return constraints, {(name, type_ if name != "type" else "", null) for name, type_, null in columns}, [
        c[0] for c in columns]


def _raw(sql: str) -> list:
    with connection.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


pack_columns = importlib.import_module("sessions_app.migrations.0018_pack_columns")


def test_event_types_become_codes_and_names_again_and_postgresql_packs_the_columns():
    """0017: every event row's type name becomes its code and, backwards, its name again; a
    name with no code stops the migration. 0018 (PostgreSQL): the message and event tables
    come back with their fixed-width columns first, widest first, the same columns, key,
    ``message_step`` and foreign key, and every row."""
    from sessions_app import models as m
    from sessions_app.selectors import step_keys
    from sessions_app.store import DjangoSessionStore

    target = latest()
    whole = [(1, ev.TurnStarted("t1", text="hi")), (2, ev.MessageCompleted("t1", text="hello", index=1)),
             (3, ev.TurnCompleted("t1", text="hello")), (4, ev.SessionReset(""))]
    stored = [("turn.started", {"$from": 0, "trigger": "inbound"}), ("message.completed", {"$from": 1}),
              ("turn.completed", {"$from": 1}), ("session.reset", {"turn_id": ""})]
    replayed = lambda: [(e.seq, e.event) for e in DjangoSessionStore().events_sync(SessionRef("ops", "codes"))]
    postgresql = connection.vendor == "postgresql"
    tables = ("sessions_app_event", "sessions_app_message")
    try:
        apps = migrate(BEFORE_CODES)
        if postgresql:  # backwards 0018 moves nothing: lay the columns out as badly as can be first
            with connection.cursor() as cur:
                for table in tables:
                    pack_columns.rebuild(cur, table, arrange=lambda columns: columns[::-1])
        before = {t: _shape(t) for t in tables} if postgresql else {}
        Session, Turn = apps.get_model("sessions_app", "Session"), apps.get_model("sessions_app", "Turn")
        Message_, Event = apps.get_model("sessions_app", "Message"), apps.get_model("sessions_app", "Event")
        s = Session.objects.create(agent="ops", key="codes", event_seq=4, status="idle")
        Turn.objects.create(id="t1", session=s, status="completed")
        Message_.objects.create(session=s, generation=0, index=0, turn_id="t1", role="user", data={"text": "hi"})
        Message_.objects.create(session=s, generation=0, index=1, turn_id="t1", role="assistant", step="model:1",
                                data={"text": "hello"})
        for seq, (type_, data) in enumerate(stored, 1):
            Event.objects.create(session=s, generation=0, seq=seq, turn_id="t1" if seq < 4 else None, type=type_,
                                 data=data)
        odd = Event.objects.create(session=s, generation=0, seq=5, turn_id="t1", type="made.up", data={})
        with pytest.raises(RuntimeError, match="made.up"):
            migrate(target)
        odd.delete()

        apps = migrate(AT_0018)  # 0019 changes these tables again (its own test, below)
        Message_, Event = apps.get_model("sessions_app", "Message"), apps.get_model("sessions_app", "Event")
        assert _raw("SELECT type FROM sessions_app_event ORDER BY seq") == [
            (m.EVENT_TYPE_CODES[t],) for t, _ in stored]
        assert list(Event.objects.filter(session_id=s.pk).order_by("seq").values_list("type", "data")) == stored
        if postgresql:
            for table in tables:
                constraints, columns, order = _shape(table)
                assert constraints == before[table][0] and columns == before[table][1]
                assert order != before[table][2]
            with connection.cursor() as cur:  # fixed widths first, widest first, then variable length
                for table in tables:
                    cur.execute(pack_columns.COLUMNS, [table])
                    columns = cur.fetchall()
                    assert pack_columns.packed(columns) == columns
            with pytest.raises(IntegrityError), transaction.atomic():  # the key is back
                Event.objects.create(session_id=s.pk, generation=0, seq=1, type="turn.started", data={})
            with pytest.raises(IntegrityError), transaction.atomic():  # and message_step
                Message_.objects.create(session_id=s.pk, generation=0, index=2, turn_id="t1", role="tool",
                                        step="model:1", data={})
            with pytest.raises(IntegrityError), transaction.atomic():  # and the foreign key
                Event.objects.create(session_id=s.pk + 1000, generation=0, seq=1, type="turn.started", data={})
        Event.objects.create(session_id=s.pk, generation=0, seq=5, turn_id="t1", type="turn.failed",
                             data={"error": "late"})  # written as codes now

        apps = migrate(BEFORE_CODES)  # backwards: names again
        Event = apps.get_model("sessions_app", "Event")
        assert [t for t, in _raw("SELECT type FROM sessions_app_event ORDER BY seq")] == [
            *(t for t, _ in stored), "turn.failed"]
        assert list(Event.objects.filter(session_id=s.pk).order_by("seq").values_list("type", flat=True))[-1] == \
            "turn.failed"
        Event.objects.filter(session_id=s.pk, seq=5).delete()
    finally:
        with connection.cursor() as cur:  # a failed run's odd row would stop the way forward
            cur.execute("DELETE FROM sessions_app_event WHERE CAST(type AS text) = 'made.up'")
        migrate(target)
    assert replayed() == whole
    assert sorted(step_keys("t1")) == ["model:1"]


#: ids of each form ``models.turn_ref`` stores: the site's (hex), a short one, one whose UTF-8 is
#: 15 bytes (stored after two 0xff, as 16 bytes are a hex id's alone), and upper-case hex
REF_IDS = ("0190f3a2b4c57d8e9fa0b1c2d3e4f506", "t1", "fifteen-chars-x", "0190F3A2B4C57D8E9FA0B1C2D3E4F506")


def test_turn_refs_become_bytes_and_text_again_and_a_turn_finds_its_messages_from_its_opening():
    """0019: every message's and event's turn id reads back the same after the column became
    ``bytea`` on PostgreSQL (16 bytes for a hex id) and text again backwards; each turn gets its
    opening from its messages; ``message_step`` goes and comes back; an event's seq is an int4
    (PostgreSQL), the table packed again."""
    from sessions_app import models as m
    from sessions_app.selectors import step_keys
    from sessions_app.store import DjangoSessionStore

    target = latest()
    postgresql = connection.vendor == "postgresql"
    try:
        apps = migrate(AT_0018)
        Session, Turn = apps.get_model("sessions_app", "Session"), apps.get_model("sessions_app", "Turn")
        Message_, Event = apps.get_model("sessions_app", "Message"), apps.get_model("sessions_app", "Event")
        s = Session.objects.create(agent="ops", key="refs", event_seq=len(REF_IDS), status="idle")
        for n, turn_id in enumerate(REF_IDS):
            Turn.objects.create(id=turn_id, session=s, order=n + 1, status="completed")
            Message_.objects.create(session=s, generation=0, index=2 * n, turn_id=turn_id, role="user",
                                    data={"text": f"hi {n}"})
            Message_.objects.create(session=s, generation=0, index=2 * n + 1, turn_id=turn_id, role="assistant",
                                    step=f"model:{2 * n + 1}", data={"text": f"hello {n}"})
            Event.objects.create(session=s, generation=0, seq=n + 1, turn_id=turn_id, type="turn.completed",
                                 data={"$from": 2 * n + 1})
        Turn.objects.create(id="never-opened", session=s, order=9, status="cancelled")

        migrate(target)
        assert list(m.Message.objects.filter(session=s.pk).order_by("index").values_list("turn_id", flat=True)) == [
            t for t in REF_IDS for _ in range(2)]
        assert list(m.Event.objects.filter(session=s.pk).order_by("seq").values_list("turn_id", flat=True)) == list(
            REF_IDS)
        assert dict(m.Turn.objects.filter(session=s.pk).values_list("id", "opening")) == {
            **{t: 2 * n for n, t in enumerate(REF_IDS)}, "never-opened": None}
        for n, turn_id in enumerate(REF_IDS):
            assert step_keys(turn_id) == [f"model:{2 * n + 1}"]
            assert m.Event.objects.get(turn_id=turn_id).seq == n + 1
        assert [(e.seq, e.event) for e in DjangoSessionStore().events_sync(SessionRef("ops", "refs"))] == [
            (n + 1, ev.TurnCompleted(t, text=f"hello {n}")) for n, t in enumerate(REF_IDS)]
        assert not _raw("SELECT 1 FROM sqlite_master WHERE name = 'message_step'" if not postgresql
                        else "SELECT 1 FROM pg_class WHERE relname = 'message_step'")
        if postgresql:
            sizes = _raw("SELECT octet_length(turn_id) FROM sessions_app_message WHERE \"index\" % 2 = 0 "
                         "ORDER BY \"index\"")
            assert sizes == [(16,), (3,), (17,), (33,)]  # hex; 0xff + 2; 0xff 0xff + 15; 0xff + 32
            assert _raw("SELECT june_tid_text(june_tid(id)) = id FROM sessions_app_turn WHERE session_id = "
                        f"{s.pk}") == [(True,)] * (len(REF_IDS) + 1)
            types = dict(_raw("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                              "attrelid = 'sessions_app_event'::regclass AND attname IN ('seq', 'turn_id')"))
            assert types == {"seq": "integer", "turn_id": "bytea"}
            with connection.cursor() as cur:
                for table in ("sessions_app_event", "sessions_app_message"):
                    cur.execute(pack_columns.COLUMNS, [table])
                    columns = cur.fetchall()
                    assert pack_columns.packed(columns) == columns

        apps = migrate(AT_0018)  # backwards: the text, message_step, an int8 seq
        Message_, Event = apps.get_model("sessions_app", "Message"), apps.get_model("sessions_app", "Event")
        assert list(Message_.objects.filter(session_id=s.pk).order_by("index").values_list("turn_id", flat=True)) == [
            t for t in REF_IDS for _ in range(2)]
        assert list(Event.objects.filter(session_id=s.pk).order_by("seq").values_list("turn_id", flat=True)) == list(
            REF_IDS)
        with pytest.raises(IntegrityError), transaction.atomic():  # message_step is back
            Message_.objects.create(session_id=s.pk, generation=0, index=20, turn_id=REF_IDS[0], role="tool",
                                    step="model:1", data={})
    finally:
        migrate(target)
    assert step_keys(REF_IDS[0]) == ["model:1"]
