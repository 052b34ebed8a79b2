"""Backwards from 0014: an event row without a time gets its message's (the code of before
reads the row's own; now, for a reference nothing resolves). Nothing to convert forwards. A migration of its own: on PostgreSQL,
0014's ALTER TABLE may not follow these UPDATEs in one transaction."""

from django.db import migrations

MESSAGE_AT = {
    "postgresql": "(e.data ->> '$from')::integer",
    "sqlite": "json_extract(e.data, '$.\"$from\"')",
}


def give_the_time_back(apps, schema_editor) -> None:
    position = MESSAGE_AT[schema_editor.connection.vendor]
    schema_editor.execute(
        "UPDATE sessions_app_event SET created_at = coalesce((SELECT m.created_at FROM sessions_app_message m "
        "JOIN sessions_app_event e ON m.session_id = e.session_id AND m.generation = e.generation "
        f"AND m.\"index\" = {position} WHERE e.session_id = sessions_app_event.session_id "
        "AND e.generation = sessions_app_event.generation AND e.seq = sessions_app_event.seq), CURRENT_TIMESTAMP) "
        "WHERE created_at IS NULL", None)


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0014_event_time_of_its_message'),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, give_the_time_back),
    ]
