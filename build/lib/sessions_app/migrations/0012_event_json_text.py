"""An event's JSON kept as its text on PostgreSQL (``json``, not ``jsonb``), as a message's
(0011, ``models.TextJSONField``): an event that refers to a message (``store.eventlog``) keeps
``{"$from":2}``, 12 bytes as text and 37 as jsonb. SQLite keeps JSON as text already: nothing to
do there. Reversible (the rows are cast back)."""

import sessions_app.models
from django.db import migrations


def _cast(to: str):
    def cast(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f'ALTER TABLE "sessions_app_event" ALTER COLUMN "data" TYPE {to} USING "data"::{to}')
    return cast


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0011_message_json_text'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='event',
                    name='data',
                    field=sessions_app.models.TextJSONField(),
                ),
            ],
            database_operations=[migrations.RunPython(_cast("json"), _cast("jsonb"))],
        ),
    ]
