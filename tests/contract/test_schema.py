"""The schema the migrations make (the test database's) is the snapshot in
``schema/sessions_app.json``. It was first written from databases built by the 24 migrations of
before the reset (0.3.0), to prove the fresh ``0001_initial`` and ``0002_database`` made the same
tables, columns in the same order, indexes, constraints and PostgreSQL functions. The migrations
0.3.0 grew before its release were folded back into those two: the fold made the same schema
but for the order of the columns those migrations had added at a table's end, and the
two-argument ``june_start_refused`` (a fresh database has only the three-argument one). A
migration that changes the schema on purpose writes the snapshot again (``schema_dump.py`` says
how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db import connection

from .schema_dump import SNAPSHOT, postgresql_schema, sqlite_schema

pytestmark = pytest.mark.django_db


def test_the_migrations_make_the_schema_of_the_snapshot():
    expected = json.loads(SNAPSHOT.read_text())
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            got = json.loads(json.dumps(postgresql_schema(cur)))
            assert got == expected["postgresql"]
        else:
            assert sqlite_schema(cur) == expected["sqlite"]


def test_no_migration_reads_the_live_models():
    """The old 0017 imported ``EVENT_TYPE_CODES`` from ``sessions_app.models``: editing the model
    changed an old migration. The migrations may name a model field's class (Django writes
    ``sessions_app.models.TurnRefField``), never read a value of the module."""
    folder = Path(__file__).resolve().parents[2] / "sessions_app" / "migrations"
    for path in sorted(folder.glob("0*.py")):
        text = path.read_text()
        assert "from sessions_app.models import" not in text and "importlib" not in text, path.name
        uses = {
            line.split("sessions_app.models.", 1)[1].split("(", 1)[0]
            for line in text.splitlines()
            if "sessions_app.models." in line
        }
        assert uses <= {"TurnRefField", "TextJSONField", "EventTypeField"}, (path.name, uses)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_no_index_is_the_leading_part_of_another():
    """The session's owner had an index of its own beside the (owner, -updated_at) one that leads
    with it: every row version of a session (four a turn) kept an entry in both, and every
    statement that wrote the row opened both. A plain index (not unique, not partial) whose
    columns lead another's on the same table serves nothing the other does not."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname, i.relname, x.indkey::int2[], x.indisunique, x.indpred IS NOT NULL "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relname LIKE 'sessions_app%%' AND x.indexprs IS NULL"
        )
        indexes = cur.fetchall()
    redundant = [
        (table, name, other)
        for table, name, keys, unique, partial in indexes
        if not unique and not partial
        for table_, other, keys_, _, partial_ in indexes
        if table_ == table and other != name and not partial_ and len(keys_) > len(keys) and keys_[: len(keys)] == keys
    ]
    assert redundant == []
