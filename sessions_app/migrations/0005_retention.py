"""Retention: the legal hold on a session, and the usage totals of deleted turns."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0004_auditevent'),
    ]

    operations = [
        migrations.AddField(
            model_name='session',
            name='legal_hold',
            field=models.BooleanField(default=False),
        ),
        migrations.CreateModel(
            name='UsageTotal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent', models.CharField(max_length=64)),
                ('day', models.DateField()),
                ('turns', models.PositiveIntegerField(default=0)),
                ('usage', models.JSONField(blank=True, default=dict)),
            ],
            options={
                'verbose_name': 'usage of deleted turns',
                'verbose_name_plural': 'usage of deleted turns',
                'constraints': [models.UniqueConstraint(fields=('agent', 'day'), name='usage_total_day')],
            },
        ),
    ]
