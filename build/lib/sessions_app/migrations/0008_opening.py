"""june_start_refused(): raised by a turn's creation on PostgreSQL (``sessions_app.store.opening``)
when ``rules.check_start`` refuses it, with the facts it was refused on in the error's DETAIL
(a JSON object the store hands back to ``rules.check_start``). An error, not a conditional
INSERT of 0 rows, so the creation is one round trip: the rest of its statements are skipped and
its transaction rolls back, the session it may have just created included.

And ``turn_waiting``: the session status (recomputed at every turn's creation and status
change) looks a session's parents parked on children up instead of scanning all its turns."""

from django.db import migrations, models

CREATE = """
CREATE OR REPLACE FUNCTION june_start_refused(turn_exists boolean, parked boolean) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'the turn may not start'
        USING ERRCODE = 'JUNE2',
              DETAIL = json_build_object('turn_exists', turn_exists, 'parked', parked)::text;
END
$$
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE, params=None)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS june_start_refused(boolean, boolean)")


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0007_subagents")]
    operations = [
        migrations.RunPython(create, drop),
        # the session status's "parked on children" lookup, without a scan of the session's turns
        migrations.AddIndex(model_name="turn", index=models.Index(
            fields=["session"], condition=models.Q(waiting__gt=0), name="turn_waiting")),
    ]
