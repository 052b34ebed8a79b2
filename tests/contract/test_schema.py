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
