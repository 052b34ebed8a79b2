"""An event that refers to a message keeps no time of its own: it commits with the message, at
the message's ``created_at`` (``store.eventlog.timed``). Rows written before keep theirs (both
read the same). 0015 gives the rows their time back on the way back."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0013_event_call_implied'),
    ]

    operations = [
        migrations.AlterField(
            model_name='event',
            name='created_at',
            field=models.DateTimeField(auto_now_add=True, null=True),
        ),
    ]
