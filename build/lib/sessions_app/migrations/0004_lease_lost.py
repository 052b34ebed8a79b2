"""june_lease_lost(): raised by a fenced checkpoint on PostgreSQL whose attempt no longer owns
its turn. An error (not an UPDATE of 0 rows) aborts the transaction inside the server, so a
checkpoint can send its COMMIT in the same round trip as its statements: a stale attempt's
COMMIT is never executed and its writes, sync-tool writes included, roll back."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION june_lease_lost(turn_id text, attempt_id text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'turn %: attempt % no longer owns the lease', turn_id, attempt_id
        USING ERRCODE = 'JUNE1';
END
$$
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)  # no placeholders: RAISE has its own %


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS june_lease_lost(text, text)")


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0003_lean_indexes")]
    operations = [migrations.RunPython(create, drop)]
