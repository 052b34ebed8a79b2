"""An ``action.requested`` that refers to a message which made one call no longer names it
(``"$call"``, ``store.eventlog``): nothing to convert forwards (a row that names it still
replays). Backwards, such rows get their ``"$call"`` back, which the code of before reads. A
migration of its own: on PostgreSQL, 0012's ALTER TABLE may not follow these UPDATEs in one
transaction."""

from django.db import migrations

NAME_THE_CALL = {
    "postgresql": (
        "UPDATE sessions_app_event e SET data = (e.data::jsonb || jsonb_build_object('$call', "
        "(SELECT m.data::jsonb -> 'tool_calls' -> 0 ->> 'id' FROM sessions_app_message m "
        "WHERE m.session_id = e.session_id AND m.generation = e.generation "
        "AND m.\"index\" = (e.data::jsonb ->> '$from')::integer)))::json "
        "WHERE e.type = 'action.requested' AND e.data::jsonb ? '$from' AND NOT e.data::jsonb ? '$call'"
    ),
    "sqlite": (
        "UPDATE sessions_app_event SET data = json_set(data, '$.\"$call\"', "
        "(SELECT json_extract(m.data, '$.tool_calls[0].id') FROM sessions_app_message m "
        "WHERE m.session_id = sessions_app_event.session_id AND m.generation = sessions_app_event.generation "
        "AND m.\"index\" = json_extract(sessions_app_event.data, '$.\"$from\"'))) "
        "WHERE type = 'action.requested' AND json_type(data, '$.\"$from\"') IS NOT NULL "
        "AND json_type(data, '$.\"$call\"') IS NULL"
    ),
}


def name_the_call(apps, schema_editor) -> None:
    schema_editor.execute(NAME_THE_CALL[schema_editor.connection.vendor], None)


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0012_event_json_text'),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, name_the_call),
    ]
