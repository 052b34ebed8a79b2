"""Branches of a conversation: a counter of the generation numbers handed out (sessions reset
before it start it at their live generation) and a row per branch."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0002_database'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='session',
            name='generation_seq',
            field=models.IntegerField(default=0),
        ),
        # a number a reset handed out before is never handed out again
        migrations.RunSQL("UPDATE sessions_app_session SET generation_seq = generation", migrations.RunSQL.noop),
        migrations.CreateModel(
            name='Branch',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.IntegerField()),
                ('parent_generation', models.IntegerField(blank=True, null=True)),
                ('fork_index', models.IntegerField(default=0)),
                ('boundary', models.IntegerField(default=0)),
                ('summary_index', models.IntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('by', models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='branches', to='sessions_app.session')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('session', 'generation'), name='branch_generation')],
            },
        ),
    ]
