"""Compaction: the live generation's boundary and summary position on the session row."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0005_drop_retry_budget")]
    operations = [
        migrations.AddField("session", "boundary", models.IntegerField(default=0)),
        migrations.AddField("session", "summary_index", models.IntegerField(null=True, blank=True)),
    ]
