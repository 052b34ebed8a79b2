"""``Attachment.owner_id`` was a bigint (a user model keyed by a UUID or a string could store no
upload); migrations 0003/0004 make it a foreign key to the user model. An install with integer
user keys keeps who uploaded what: the copy carries every uploader that still exists over."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agents_app.models import Attachment

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("agents_app", "0002_unsent_index")]
AFTER = [("agents_app", "0004_attachment_owner_legacy")]


def _migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def test_uploads_keep_their_owner_across_the_migration():
    alice = get_user_model().objects.create_user("alice-mig", password="x")
    _migrate(BEFORE)
    try:
        with connection.cursor() as cur:
            for ident, owner in (("a" * 32, alice.pk), ("b" * 32, alice.pk + 1000), ("c" * 32, None)):
                cur.execute(
                    "INSERT INTO agents_app_attachment (id, agent, session_key, owner_id, file, content_type, "
                    "size, name, sha256, turn_id, created_at) VALUES (%s, 'ops', 's', %s, 'f', 'image/png', 1, "
                    "'n', 'h', '', CURRENT_TIMESTAMP)",
                    [ident, owner],
                )
    finally:
        _migrate(AFTER)
    owners = dict(Attachment.objects.values_list("id", "owner_id"))
    # the uploader kept; an uploader deleted before the migration (no such user) left unowned
    assert owners == {"a" * 32: alice.pk, "b" * 32: None, "c" * 32: None}
