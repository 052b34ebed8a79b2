"""When a turn started (its first claim) and ended (completed, failed, cancelled)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0007_approval_requests_plural"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="turn",
            name="ended_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
