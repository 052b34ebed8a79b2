# Subagents: a child turn names its parent (and the parent's step its result goes to) and its
# depth; a parent counts the children it is parked on.
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0006_compaction")]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="parent",
            field=models.ForeignKey(blank=True, db_constraint=False, null=True,
                                    on_delete=django.db.models.deletion.DO_NOTHING, related_name="children",
                                    to="sessions_app.turn"),
        ),
        migrations.AddField(model_name="turn", name="spawn_step",
                            field=models.CharField(blank=True, default="", max_length=300)),
        migrations.AddField(model_name="turn", name="depth", field=models.IntegerField(default=0)),
        migrations.AddField(model_name="turn", name="waiting", field=models.IntegerField(default=0)),
    ]
