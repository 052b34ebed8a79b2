"""The worker heartbeat (``WorkerBeat``: docs/operations.md "Health"). Only this table."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0021_event_without_rowid"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerBeat",
            fields=[
                ("id", models.CharField(max_length=300, primary_key=True, serialize=False)),
                ("started_at", models.DateTimeField()),
                ("seen_at", models.DateTimeField()),
                ("running", models.PositiveIntegerField(default=0)),
                ("slots", models.PositiveIntegerField(default=0)),
            ],
            options={"verbose_name": "worker heartbeat"},
        ),
    ]
