"""What a turn's creation and a checkpoint write besides their rows (migrations 0020, 0021): no
index entry for a turn without a parent or a creator, no second index on the session, no
``LIKE`` copies (PostgreSQL), and on SQLite an event stored once, in its table's own b-tree. The
lookups those indexes served still use an index."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

TURN, EVENT = "sessions_app_turn", "sessions_app_event"


def indexes(table: str) -> dict[str, str]:
    """The table's indexes by name: their definitions (SQLite: the ``CREATE INDEX``, empty for
    one the table's key made; PostgreSQL: ``pg_indexes.indexdef``)."""
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(
                "SELECT name, COALESCE(sql, '') FROM sqlite_master WHERE type = 'index' AND tbl_name = %s", [table]
            )
        else:
            cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cur.fetchall())


def plan(sql: str, params: list) -> str:
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return " ".join(str(row[-1]) for row in cur.fetchall())
        cur.execute("SET LOCAL enable_seqscan = off")  # a test's table is tiny: ask what it could use
        cur.execute(f"EXPLAIN {sql}", params)
        return " ".join(row[0] for row in cur.fetchall())


def test_a_turns_indexes_hold_no_entry_for_an_empty_parent_or_creator_and_none_twice():
    found = indexes(TURN)
    assert "turn_parent" in found and "turn_created_by" in found, found
    assert "parent_id IS NOT NULL" in found["turn_parent"].replace('"', "").replace("(", "").replace(")", "")
    assert "created_by_id IS NOT NULL" in found["turn_created_by"].replace('"', "").replace("(", "").replace(")", "")
    # the foreign keys' own indexes and PostgreSQL's LIKE copies are gone
    own = [name for name in found if name.startswith(f"{TURN}_") and name != f"{TURN}_pkey"]
    assert not own and not [name for name in found if name.endswith("_like")], found
    # what is left: the key, (session, status, order), (status, created_at), waiting, chain, the two above,
    # and created_at (0023: an agent's tokens of today; an append at the b-tree's right edge)
    assert "turn_created_at" in found and "created_at" in found["turn_created_by"], found
    assert len(found) == 8, found


@pytest.mark.parametrize(
    ("sql", "params", "index"),
    [
        (f"SELECT id FROM {TURN} WHERE parent_id = %s", ["p"], "turn_parent"),
        (f"SELECT id FROM {TURN} WHERE parent_id IN (%s, %s)", ["p", "q"], "turn_parent"),  # the console's tree
        (f"UPDATE {TURN} SET created_by_id = NULL WHERE created_by_id IN (%s)", [1], "turn_created_by"),  # SET_NULL
        (f"DELETE FROM {TURN} WHERE session_id IN (%s)", [1], "sessions_ap_session_c5ebd8_idx"),  # the cascade
        (f'SELECT id FROM {TURN} WHERE session_id = %s ORDER BY "order"', [1], "sessions_ap_session_c5ebd8_idx"),
        # the daily token quotas (sessions_app.quotas): a user's turns of today, every turn of today
        (
            f"SELECT usage FROM {TURN} WHERE created_by_id = %s AND created_at >= %s",
            [1, "2026-01-01"],
            "turn_created_by",
        ),
        (f"SELECT usage FROM {TURN} WHERE created_at >= %s", ["2026-01-01"], "turn_created_at"),
        # the sweeper's expired leases (the running turns, their expiry a filter), the dashboard's
        # and the takes' turns of a status, oldest first
        (
            f"SELECT id FROM {TURN} WHERE status = %s AND lease_expires_at < %s",
            ["running", 1.0],
            "turn_status_created",
        ),
        (f"SELECT id FROM {TURN} WHERE status = %s ORDER BY created_at LIMIT 8", ["queued"], "turn_status_created"),
    ],
)
def test_lookups_by_parent_creator_and_session_still_use_an_index(sql, params, index):
    assert index in plan(sql, params)


def test_an_event_is_stored_once_in_its_tables_own_btree():
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [EVENT])
            # a later migration of this table (Django rebuilds it on SQLite) must say it again
            assert cur.fetchone()[0].rstrip().upper().endswith("WITHOUT ROWID")
        else:  # PostgreSQL: a heap and its primary key, no other index
            assert list(indexes(EVENT)) == [f"{EVENT}_pkey"]


def test_the_sweep_of_unsent_uploads_reads_only_the_unsent_by_age():
    """``attachments_sweep_unsent`` reads the uploads nobody sent that are older than a cutoff:
    a partial index on ``created_at`` of the unsent ones (agents_app 0002), not a scan of every
    attachment the site ever had."""
    from datetime import timedelta

    from django.utils import timezone

    from agents_app.models import Attachment

    query = Attachment.objects.filter(turn_id="", created_at__lt=timezone.now() - timedelta(hours=24))
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET LOCAL enable_seqscan = off")  # a test's table is tiny: ask what it could use
    assert "attachment_unsent" in query.explain()


def test_a_leases_writes_are_heap_only_updates():
    """No index holds the lease's expiry (nor its owner): a take's mark, a heartbeat and the
    sweeper's mark write only those, and PostgreSQL updates the row in its page without a new
    entry in each of the turn table's indexes (a heap-only update). With the expiry in an index
    (status, lease_expires_at), every one of them was a new entry in all eight."""
    if connection.vendor != "postgresql":
        pytest.skip("heap-only updates are PostgreSQL's")
    from sessions_app import models as m

    s = m.Session.objects.create(agent="ops", key="hot")
    m.Turn.objects.create(id="hot", session=s, order=1, status="running", lease_owner="w", lease_expires_at=1.0)
    hot = "SELECT pg_stat_get_xact_tuples_hot_updated('sessions_app_turn'::regclass)"
    with connection.cursor() as cur:
        cur.execute(hot)
        before = cur.fetchone()[0]
        cur.execute(f"UPDATE {TURN} SET lease_expires_at = 31.0 WHERE id = 'hot'")  # a heartbeat
        cur.execute(f"UPDATE {TURN} SET lease_owner = 'taken:w', lease_expires_at = 61.0 WHERE id = 'hot'")  # a take
        cur.execute(hot)
        assert cur.fetchone()[0] == before + 2
