"""A message's JSON kept as its text on PostgreSQL (``json``, not ``jsonb``: a third smaller
for small messages, ``models.TextJSONField``). SQLite keeps JSON as text already: nothing to
do there. Reversible (the rows are cast back)."""

import sessions_app.models
from django.db import migrations


def _cast(to: str):
    def cast(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f'ALTER TABLE "sessions_app_message" ALTER COLUMN "data" TYPE {to} USING "data"::{to}')
    return cast


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0010_keyed_by_position'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='message',
                    name='data',
                    field=sessions_app.models.TextJSONField(),
                ),
            ],
            database_operations=[migrations.RunPython(_cast("json"), _cast("jsonb"))],
        ),
    ]
