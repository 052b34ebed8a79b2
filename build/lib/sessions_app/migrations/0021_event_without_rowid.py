"""SQLite: the event table becomes a ``WITHOUT ROWID`` table, clustered on its key (session,
generation, seq).

A rowid table keeps its rows in one b-tree and its primary key in another (the automatic index
``sqlite_autoindex_…``), so every event written changed a page of each, and every checkpoint
that emits events wrote one page more to the WAL than its rows need (a 3-step turn writes four
such checkpoints). Clustered on the key, an event is one entry in one b-tree, and its key is
stored once. Event rows are small (an event that repeats a message keeps its position,
``store.eventlog``), which is where SQLite advises ``WITHOUT ROWID``. The message table stays a
rowid table: a 2,000-character message is larger than a clustered b-tree keeps on its page.

The table is rebuilt with its own definition plus ``WITHOUT ROWID``, rows copied. Django's
later ``AlterField`` on this table would rebuild it without the clause (a slower table, not a
wrong one); ``tests/integration/test_turn_indexes.py`` fails if that happens. PostgreSQL: no
change. Backwards: a rowid table again.
"""

from django.db import migrations

TABLE = "sessions_app_event"
CLAUSE = " WITHOUT ROWID"


def _rebuild(schema_editor, *, clustered: bool) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [TABLE])
        (sql,) = cur.fetchone()
        sql = sql.rstrip()
        if sql.upper().endswith(CLAUSE.strip()) == clustered:
            return  # already so
        definition = sql + CLAUSE if clustered else sql[: -len(CLAUSE)]
        new = f"new__{TABLE}"
        cur.execute(definition.replace(f'"{TABLE}"', f'"{new}"', 1))
        cur.execute(f'INSERT INTO "{new}" SELECT * FROM "{TABLE}"')
        cur.execute(f'DROP TABLE "{TABLE}"')
        cur.execute(f'ALTER TABLE "{new}" RENAME TO "{TABLE}"')


def forwards(apps, schema_editor):
    _rebuild(schema_editor, clustered=True)


def backwards(apps, schema_editor):
    _rebuild(schema_editor, clustered=False)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0020_turn_indexes"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
    ]
