"""An event's type stored as a smallint code (``models.EVENT_TYPE_CODES``), not its name: 2
bytes a row where the name took up to 21. Both ways keep every row; a name with no code stops
the migration, naming it, rather than store a code that reads back as something else.

The codes are the model's own table: it only grows and is never renumbered, so the table of
any later code maps the rows of this one the same way."""

from django.db import migrations

import sessions_app.models
from sessions_app.models import EVENT_TYPE_CODES

TABLE = "sessions_app_event"


def _names_to_codes() -> str:
    whens = " ".join(f"WHEN '{name}' THEN {code}" for name, code in EVENT_TYPE_CODES.items())
    return f"CASE type {whens} END"


def _codes_to_names() -> str:
    whens = " ".join(f"WHEN {code} THEN '{name}'" for name, code in EVENT_TYPE_CODES.items())
    return f"CASE type {whens} END"


def _refuse_unknown(schema_editor, known: list) -> None:
    with schema_editor.connection.cursor() as cur:
        cur.execute(f"SELECT DISTINCT type FROM {TABLE} WHERE type NOT IN ({', '.join(['%s'] * len(known))})", known)
        unknown = sorted(str(row[0]) for row in cur.fetchall())
    if unknown:
        raise RuntimeError(f"{TABLE} holds event types with no code in models.EVENT_TYPE_CODES: {unknown}")


def _as_codes():
    field = sessions_app.models.EventTypeField()
    field.set_attributes_from_name("type")
    return field


def to_codes(apps, schema_editor) -> None:
    _refuse_unknown(schema_editor, list(EVENT_TYPE_CODES))
    if schema_editor.connection.vendor == "postgresql":  # one rewrite, converted on the way
        schema_editor.execute(f"ALTER TABLE {TABLE} ALTER COLUMN type TYPE smallint USING ({_names_to_codes()})")
        return
    # SQLite: the table remade with an integer column (the names copied as they are), then coded
    Event = apps.get_model("sessions_app", "Event")  # as it was: type a CharField
    schema_editor.alter_field(Event, Event._meta.get_field("type"), _as_codes())
    schema_editor.execute(f"UPDATE {TABLE} SET type = {_names_to_codes()}")


def to_names(apps, schema_editor) -> None:
    _refuse_unknown(schema_editor, list(EVENT_TYPE_CODES.values()))
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE {TABLE} ALTER COLUMN type TYPE varchar(40) USING ({_codes_to_names()})")
        return
    Event = apps.get_model("sessions_app", "Event")
    schema_editor.execute(f"UPDATE {TABLE} SET type = {_codes_to_names()}")
    schema_editor.alter_field(Event, _as_codes(), Event._meta.get_field("type"))


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0016_turn_chain"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(model_name="event", name="type", field=sessions_app.models.EventTypeField()),
            ],
            database_operations=[migrations.RunPython(to_codes, to_names)],
        ),
    ]
