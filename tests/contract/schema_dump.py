"""sessions_app's schema as plain data, from the database's own catalog: what
``test_schema.py`` compares with ``schema/sessions_app.json``.

The snapshot was written from databases built by the 24 migrations before the reset of 0.3.0,
so the test proves the fresh chain makes the same schema. A model change that changes the
schema on purpose writes it again::

    .venv/bin/python -m tests.contract.schema_dump sqlite:////path/to/db postgres://…/db
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parent / "schema" / "sessions_app.json"

SQLITE = "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND tbl_name LIKE 'sessions_app%' ORDER BY sql"
PG = {
    # in their order, not by ordinal_position: a column dropped by the old chain left a gap in it
    "columns": "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable "
    "FROM information_schema.columns WHERE table_schema = 'public' AND table_name LIKE 'sessions_app%' "
    "ORDER BY table_name, ordinal_position",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
    "AND tablename LIKE 'sessions_app%' ORDER BY tablename, indexname",
    "constraints": "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
    "JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public' "
    "AND c.conrelid::regclass::text LIKE 'sessions_app%' ORDER BY 1, 2",
    "functions": "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = "
    "p.pronamespace WHERE n.nspname = 'public' AND p.proname LIKE 'june%' ORDER BY 1",
}


def _rows(cur: Any, sql: str) -> list[list[Any]]:
    cur.execute(sql)
    return [list(row) for row in cur.fetchall()]


def sqlite_schema(cur: Any) -> list[str]:
    return [row[0] for row in _rows(cur, SQLITE)]


def postgresql_schema(cur: Any) -> dict[str, list[list[Any]]]:
    # constraint names of foreign keys carry a hash Django derives from the columns: stable
    return {name: _rows(cur, sql) for name, sql in PG.items()}


def main(sqlite_url: str, postgres_url: str) -> None:
    import psycopg

    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        lite = sqlite_schema(conn.cursor())
    with psycopg.connect(postgres_url) as conn, conn.cursor() as cur:
        pg = postgresql_schema(cur)
    SNAPSHOT.write_text(json.dumps({"sqlite": lite, "postgresql": pg}, indent=1) + "\n")
    print(f"wrote {SNAPSHOT}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
