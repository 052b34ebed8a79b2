"""A step that points at a message its unit wrote is recorded in that message's row (its
``step`` column, unique per turn: ``message_step``) instead of a Step row of its own.

Step rows written before stay where they are: a turn's steps are its Step rows and the steps
folded into its messages (``reads.STEPS``). Backwards, the folded steps become Step rows again
(pointing at their message) before the column goes.
"""

from django.db import migrations, models

UNFOLD = (
    "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) "
    'SELECT turn_id, step, "index", NULL, created_at FROM sessions_app_message '
    "WHERE step IS NOT NULL AND turn_id IS NOT NULL"
)


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0008_opening'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='step',
            field=models.CharField(blank=True, max_length=300, null=True),
        ),
        migrations.AddConstraint(
            model_name='message',
            constraint=models.UniqueConstraint(condition=models.Q(('step__isnull', False)), fields=('turn', 'step'),
                                               name='message_step'),
        ),
        migrations.RunSQL(migrations.RunSQL.noop, reverse_sql=UNFOLD),
    ]
