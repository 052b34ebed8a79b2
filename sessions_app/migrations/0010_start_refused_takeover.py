"""``june_start_refused`` with a third fact, ``taken_over`` (``store.opening.LOCK_AND_CHECK``):
a start refused because a person has the session is refused in the statement that creates the
turn, under the session's lock, with no query of its own (the two-argument function stays for a
process still running the code before this one). PostgreSQL only; SQLite has no functions."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION june_start_refused(turn_exists boolean, parked boolean, taken_over boolean)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'the turn may not start'
        USING ERRCODE = 'JUNE2',
              DETAIL = json_build_object('turn_exists', turn_exists, 'parked', parked,
                                         'taken_over', taken_over)::text;
END
$$;
"""
DROP = "DROP FUNCTION IF EXISTS june_start_refused(boolean, boolean, boolean)"


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0009_audit_list_reads")]

    operations = [migrations.RunPython(forwards, backwards)]
