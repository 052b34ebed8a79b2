"""Fewer index entries per turn: beside its row, a turn's creation wrote an entry in nine indexes
on PostgreSQL and seven on SQLite; now in four on both (five when a user started the turn).

- ``session_id`` loses its own index: ``(session_id, status, order)`` leads with it, and serves
  every lookup by session (the cascade of a session's deletion among them).
- ``parent_id`` and ``created_by_id`` are indexed only where set (``turn_parent``,
  ``turn_created_by``): a turn without a parent, or started by no user (a schedule, a webhook,
  the store's own callers), writes no entry there. A lookup by a value (``=``, ``IN``) implies
  the column is not null, so both databases still use them.
- PostgreSQL: the ``varchar_pattern_ops`` copies Django adds beside a ``varchar`` key's index
  (``…_like``, for ``LIKE 'prefix%'``) go for ``id`` and ``parent_id``: nothing looks turns up
  by a prefix of their id.

On SQLite a turn's creation wrote 10 pages to the WAL, now 7 (``bench/bench_short.py``'s turns;
``tests/integration/test_turn_indexes.py`` checks the indexes and the plans). Only indexes change
(no table is rebuilt: the model's state changes with ``SeparateDatabaseAndState``). Backwards:
the indexes of before.
"""

from django.conf import settings
from django.db import migrations, models

import django.db.models.deletion

TABLE = "sessions_app_turn"
#: the indexes Django made for the three foreign keys and the key (the last two: PostgreSQL only)
OLD = {
    "sessions_app_turn_session_id_21db3e6d": '("session_id")',
    "sessions_app_turn_parent_id_13f35d7f": '("parent_id")',
    "sessions_app_turn_created_by_id_40db8375": '("created_by_id")',
}
OLD_LIKE = {
    "sessions_app_turn_parent_id_13f35d7f_like": '("parent_id" varchar_pattern_ops)',
    "sessions_app_turn_id_b8bca8fb_like": '("id" varchar_pattern_ops)',
}
NEW = [
    models.Index(fields=["parent"], condition=models.Q(parent__isnull=False), name="turn_parent"),
    models.Index(fields=["created_by"], condition=models.Q(created_by__isnull=False), name="turn_created_by"),
]


def _old(schema_editor) -> dict[str, str]:
    return {**OLD, **OLD_LIKE} if schema_editor.connection.vendor == "postgresql" else OLD


def forwards(apps, schema_editor):
    turn = apps.get_model("sessions_app", "Turn")
    for name in _old(schema_editor):
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')
    for index in NEW:
        schema_editor.add_index(turn, index)


def backwards(apps, schema_editor):
    turn = apps.get_model("sessions_app", "Turn")
    for index in NEW:
        schema_editor.remove_index(turn, index)
    for name, columns in _old(schema_editor).items():
        schema_editor.execute(f'CREATE INDEX "{name}" ON "{TABLE}" {columns}')


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0019_turn_refs'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='turn',
                    name='created_by',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='turn',
                    name='parent',
                    field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='children', to='sessions_app.turn'),
                ),
                migrations.AlterField(
                    model_name='turn',
                    name='session',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='turns', to='sessions_app.session'),
                ),
                *(migrations.AddIndex(model_name='turn', index=index) for index in NEW),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
