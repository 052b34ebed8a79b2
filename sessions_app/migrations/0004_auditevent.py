"""The audit log (``models.AuditEvent``). On PostgreSQL it is append-only in the database: a
trigger refuses every UPDATE, and every DELETE but ``audit.audit_purge``'s, which sets
``june.audit_purge_before`` for its own transaction and deletes only rows older than that
(TRUNCATE, an owner's tool, is left alone). SQLite has no such guard: the admin refuses there."""

import django.utils.timezone
from django.db import migrations, models

PG_TRIGGER = r"""
CREATE OR REPLACE FUNCTION june_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  before_ts timestamptz := NULLIF(current_setting('june.audit_purge_before', true), '')::timestamptz;
BEGIN
  IF TG_OP = 'DELETE' AND before_ts IS NOT NULL AND OLD.at < before_ts THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'the audit log is append-only: % of row % refused', TG_OP, OLD.id USING ERRCODE = 'JUNE4';
END
$$;
CREATE TRIGGER june_audit_append_only BEFORE UPDATE OR DELETE ON sessions_app_auditevent
  FOR EACH ROW EXECUTE FUNCTION june_audit_append_only();
"""
PG_DROP = ("DROP TRIGGER IF EXISTS june_audit_append_only ON sessions_app_auditevent; "
           "DROP FUNCTION IF EXISTS june_audit_append_only()")


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_TRIGGER, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_DROP, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0003_branches'),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ('action', models.CharField(choices=[('session.read', 'read a session'), ('archive.read', 'read an archived generation'), ('turn.read', 'read a turn'), ('attachment.read', 'downloaded an attachment'), ('export.read', 'downloaded an export'), ('search', 'searched every session'), ('answer', 'answered a request'), ('takeover', 'took over a session'), ('handback', 'handed a session back'), ('erase', "erased a user's data"), ('retention', 'retention sweep'), ('audit.purge', 'purged old audit rows')], max_length=32)),
                ('actor_id', models.CharField(blank=True, default='', max_length=64)),
                ('actor', models.CharField(blank=True, default='', max_length=150)),
                ('subject', models.CharField(blank=True, db_index=True, default='', max_length=64)),
                ('session_id', models.BigIntegerField(blank=True, null=True)),
                ('generation', models.IntegerField(blank=True, null=True)),
                ('turn_id', models.CharField(blank=True, default='', max_length=32)),
                ('attachment_id', models.CharField(blank=True, default='', max_length=32)),
                ('remote_addr', models.CharField(blank=True, default='', max_length=64)),
                ('detail', models.JSONField(blank=True, default=dict)),
            ],
            options={
                'verbose_name': 'audit event',
                'ordering': ['-at', '-id'],
                'indexes': [models.Index(fields=['session_id', 'at'], name='audit_session')],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
