"""A message or event row refers to its turn in 17 bytes on PostgreSQL, and a turn's messages are
found from its opening by the message table's key: ``message_step`` goes.

- ``Turn.opening``: the position of the turn's first message in its generation (filled here
  from the messages). A turn's messages are read from there by the key (session, generation,
  index): its folded steps (``reads.STEPS``) and the guard that records a step once
  (``checkpoint.STEP_GUARD``), which replaces ``message_step``'s uniqueness. That index cost
  ~75 bytes a message, the turn id's text and the step's key again.
- ``Message.turn_id`` and ``Event.turn_id`` (PostgreSQL): ``bytea``, the id's 16 bytes when it is
  32 lowercase hex digits (every id the site makes), else its UTF-8 after 0xff
  (``models.turn_ref``): 17 bytes where the text took 33, in every message and event row. The
  columns were foreign keys without a constraint or an index; they are plain columns now
  (``models.TurnRefField``). SQLite keeps the text.
- ``Event.seq``: an int4 (2**31 events a session, as a generation's message index is an int4): 8
  bytes less an event row and a key entry (PostgreSQL; SQLite stores integers by value). The
  event table is then packed again (0018's ``rebuild``: the int4 goes after the int8s).

``june_tid(text)`` and ``june_tid_text(bytea)`` are ``turn_ref`` and its inverse in SQL, for
the store's statements; ``june_step_recorded`` raises SQLSTATE JUNE3 for the guard.

From here on an event that refers to a message and keeps nothing else is stored as the bare
position (``store.eventlog.stored``); rows written before keep ``{"$from": n}``, and both read
the same. Backwards, the bare ones become ``{"$from": n}`` again: the code of before reads objects.

Both tables are rewritten under an exclusive lock (README: stop the processes first).
Backwards: the text again, ``message_step`` again (it fails if a step was recorded twice, which
the guard refuses), no ``opening``.
"""

import importlib

from django.db import migrations, models

import sessions_app.models

packing = importlib.import_module("sessions_app.migrations.0018_pack_columns")

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION june_tid(t text) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN t ~ '^[0-9a-f]{32}$' THEN decode(t, 'hex')
              WHEN octet_length(t) = 15 THEN '\xffff'::bytea || convert_to(t, 'UTF8')
              ELSE '\xff'::bytea || convert_to(t, 'UTF8') END
$$;
CREATE OR REPLACE FUNCTION june_tid_text(b bytea) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN length(b) = 16 THEN encode(b, 'hex') ELSE convert_from(ltrim(b, '\xff'::bytea), 'UTF8') END
$$;
CREATE OR REPLACE FUNCTION june_step_recorded(turn text, step text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'turn %: step % is already recorded', turn, step USING ERRCODE = 'JUNE3';
END
$$;
"""
DROP_FUNCTIONS = "DROP FUNCTION june_step_recorded(text, text); DROP FUNCTION june_tid_text(bytea); DROP FUNCTION june_tid(text)"

#: a turn's opening: its first message's position (one pass over the messages, not one per turn)
OPENINGS = (
    "UPDATE sessions_app_turn SET opening = f.first FROM (SELECT turn_id, session_id, generation, "
    'min("index") AS first FROM sessions_app_message WHERE turn_id IS NOT NULL GROUP BY turn_id, session_id, '
    "generation) f WHERE f.turn_id = sessions_app_turn.id AND f.session_id = sessions_app_turn.session_id "
    "AND f.generation = sessions_app_turn.generation"
)
TO_BYTES = "ALTER TABLE {table} ALTER COLUMN turn_id TYPE bytea USING june_tid(turn_id){more}"
TO_TEXT = "ALTER TABLE {table} ALTER COLUMN turn_id TYPE varchar(32) USING june_tid_text(turn_id){more}"
#: the event's seq changes with its turn id, in the same rewrite of the table
SEQ = {"sessions_app_message": ("", ""), "sessions_app_event": (", ALTER COLUMN seq TYPE integer",
                                                                 ", ALTER COLUMN seq TYPE bigint")}
TABLES = ("sessions_app_message", "sessions_app_event")
MESSAGE_STEP = ('CREATE UNIQUE INDEX message_step ON sessions_app_message (turn_id, step) '
                'WHERE step IS NOT NULL')


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cur:
        if vendor == "postgresql":
            cur.execute(FUNCTIONS)
        cur.execute(OPENINGS)  # by the text ids, before the columns change
        cur.execute("DROP INDEX IF EXISTS message_step")
        if vendor == "postgresql":
            for table in TABLES:
                cur.execute(TO_BYTES.format(table=table, more=SEQ[table][0]))
            packing.rebuild(cur, "sessions_app_event")


#: a bare reference (``2``) as the code of before reads it (``{"$from": 2}``)
BARE_TO_OBJECT = {
    "postgresql": "UPDATE sessions_app_event SET data = json_build_object('$from', data) "
                  "WHERE json_typeof(data) = 'number'",
    "sqlite": "UPDATE sessions_app_event SET data = json_object('$from', json(data)) WHERE json_type(data) = 'integer'",
}


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    with schema_editor.connection.cursor() as cur:
        cur.execute(BARE_TO_OBJECT[vendor])
        if vendor == "postgresql":
            for table in TABLES:
                cur.execute(TO_TEXT.format(table=table, more=SEQ[table][1]))
            packing.rebuild(cur, "sessions_app_event")
        cur.execute(MESSAGE_STEP)
        if vendor == "postgresql":
            cur.execute(DROP_FUNCTIONS)


def turn_ref_field():
    return sessions_app.models.TurnRefField(blank=True, null=True)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0018_pack_columns"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="opening",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            # the columns stay where they are, named as they were: only PostgreSQL's type changes
            state_operations=[
                migrations.RemoveConstraint(model_name="message", name="message_step"),
                migrations.RemoveField(model_name="message", name="turn"),
                migrations.AddField(model_name="message", name="turn_id", field=turn_ref_field()),
                migrations.RemoveField(model_name="event", name="turn"),
                migrations.AddField(model_name="event", name="turn_id", field=turn_ref_field()),
                migrations.AlterField(model_name="event", name="seq", field=models.IntegerField()),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
