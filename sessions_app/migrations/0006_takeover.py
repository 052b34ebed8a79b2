"""Takeover: a person answering in an agent's place (one open row per session)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0005_retention'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Takeover',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('generation', models.IntegerField(default=0)),
                ('operator_name', models.CharField(max_length=150)),
                ('running', models.CharField(choices=[('cancel', 'cancelled it'), ('finish', 'let it finish')], default='cancel', max_length=8)),
                ('started_at', models.DateTimeField(auto_now_add=True)),
                ('ended_at', models.DateTimeField(blank=True, null=True)),
                ('messages', models.PositiveIntegerField(default=0)),
                ('operator', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('session', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='takeovers', to='sessions_app.session')),
            ],
            options={
                'indexes': [models.Index(condition=models.Q(('ended_at__isnull', True)), fields=['started_at'], name='takeover_open')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('ended_at__isnull', True)), fields=('session',), name='takeover_one_open')],
            },
        ),
    ]
