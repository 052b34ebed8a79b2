"""PostgreSQL: the message and event tables rebuilt with their columns in the order that
wastes no alignment padding, every row kept.

PostgreSQL lays a row's columns out in their table order, each at its type's alignment: an
int4 before an int8 leaves 4 bytes of padding, and so does a varchar before a timestamptz.
Django creates a table's columns in its fields' order and adds a foreign key's column last
(``session_id``), so an event row carried ~8 bytes of padding, a message row as many. Fixed
widths first, the widest first (8, 4, 2, 1 bytes), then the variable-length columns (whose
1-byte headers need no alignment): no padding between columns at all.

The rebuild copies the rows in their key's order into a new table, drops the old one and
takes its name, then adds back the old one's constraints and indexes under their own names
(read from the catalog: the primary key, ``message_step``, the foreign key to the session).
Nothing else references these tables. SQLite stores a row's columns without padding: nothing
to do there. Backwards nothing moves: the code of before reads columns by name.
"""

from django.db import migrations

TABLES = ("sessions_app_event", "sessions_app_message")

#: where a column goes: fixed widths by alignment, widest first; variable length (typlen -1) last
ALIGNMENT_RANK = {"d": 0, "i": 1, "s": 2, "c": 3}

COLUMNS = (
    "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, t.typlen, t.typalign, "
    "pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated "
    "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
    "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
    "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
#: the foreign keys last: they check the rows already in place
CONSTRAINTS = ("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
               "ORDER BY contype = 'f', conname")
#: the indexes that back no constraint (``message_step``)
INDEXES = ("SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %s::regclass AND NOT EXISTS "
           "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid) ORDER BY i.indexrelid")
KEY = ("SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.n) FROM pg_index i "
       "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
       "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
       "WHERE i.indrelid = %s::regclass AND i.indisprimary")


def packed(columns: list[tuple]) -> list[tuple]:
    """``columns`` (name, type, not null, typlen, typalign, ...) in the order that pads nothing:
    fixed widths by alignment, widest first, then variable length; otherwise as they were."""
    return sorted(columns, key=lambda c: (c[3] < 0, ALIGNMENT_RANK[c[4]] if c[3] > 0 else 0))


def rebuild(cur, table: str, arrange=packed) -> None:
    """``table`` rebuilt with its columns in ``arrange``'s order (nothing done when they are)."""
    cur.execute(COLUMNS, [table])
    columns = cur.fetchall()
    odd = [c[0] for c in columns if c[6] or c[7]]
    if odd:  # identity and generated columns need more than a copy: none here, so none handled
        raise RuntimeError(f"{table}: identity or generated columns {odd}")
    order = arrange(columns)
    if [c[0] for c in order] == [c[0] for c in columns]:
        return
    cur.execute(CONSTRAINTS, [table])
    constraints = cur.fetchall()
    cur.execute(INDEXES, [table])
    indexes = [row[0] for row in cur.fetchall()]
    cur.execute(KEY, [table])
    key = cur.fetchone()[0]
    new = f"{table}__packed"
    names = ", ".join(f'"{c[0]}"' for c in order)
    body = ", ".join(f'"{name}" {type_}{" NOT NULL" if not_null else ""}'
                     f'{f" DEFAULT {default}" if default is not None else ""}'
                     for name, type_, not_null, _, _, default, _, _ in order)
    cur.execute(f"CREATE TABLE {new} ({body})")
    cur.execute(f"INSERT INTO {new} ({names}) SELECT {names} FROM {table}" + (f" ORDER BY {key}" if key else ""))
    cur.execute(f"DROP TABLE {table}")
    cur.execute(f"ALTER TABLE {new} RENAME TO {table}")
    for name, definition in constraints:
        cur.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    for definition in indexes:
        cur.execute(definition)
    cur.execute(f"ANALYZE {table}")


def pack(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cur:
        for table in TABLES:
            rebuild(cur, table)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0017_event_type_code"),
    ]

    operations = [
        migrations.RunPython(pack, migrations.RunPython.noop),
    ]
