"""What the models cannot say, on a new database (the project's migrations were reset in 0.3.0:
no deployment held data; CHANGELOG.md; the migrations 0.3.0 grew before its release were folded
back into ``0001_initial`` and this one).

PostgreSQL:
- the functions the store's statements call: ``june_lease_lost`` (SQLSTATE JUNE1, a fenced unit
  whose attempt lost its lease), ``june_start_refused`` (JUNE2, a refused creation, with its facts
  in the DETAIL), ``june_step_recorded`` (JUNE3, a step recorded twice), ``june_tid`` /
  ``june_tid_text`` (a turn id to its 16-byte ``bytea`` and back: ``models.TurnRefField``);
- no ``…_like`` index on the turn's primary key (ids are looked up by equality only);
- the audit log append-only (``june_audit_append_only``: a trigger refuses every UPDATE, and
  every DELETE but ``audit.audit_purge``'s, which sets ``june.audit_purge_before`` for its own
  transaction and deletes only rows older than that; TRUNCATE, an owner's tool, is left alone).
  SQLite has no such guard: the admin refuses there.

SQLite:
- the event log ``WITHOUT ROWID`` (its rows live in the key's b-tree: one b-tree, not two);
- the message, event and turn tables with their columns in the order the store was built with
  (SQLite keeps no alignment padding, so the order is only for an identical schema), and the
  turn's indexes again (its table is made anew).

The schema this makes is the snapshot ``tests/contract/test_schema.py`` compares it with
(``tests/contract/schema/``), on both backends: the old chain's of 24 migrations, and after the
fold the folded migrations' but for the order of the columns they had appended. The statements
are written out here, never read from ``sessions_app.models``: editing a model does not change
this migration.
"""

from django.conf import settings
from django.db import migrations

PG_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION june_lease_lost(turn_id text, attempt_id text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'turn %: attempt % no longer owns the lease', turn_id, attempt_id
        USING ERRCODE = 'JUNE1';
END
$$;
CREATE OR REPLACE FUNCTION june_start_refused(turn_exists boolean, parked boolean, taken_over boolean)
RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'the turn may not start'
        USING ERRCODE = 'JUNE2',
              DETAIL = json_build_object('turn_exists', turn_exists, 'parked', parked,
                                         'taken_over', taken_over)::text;
END
$$;
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
CREATE OR REPLACE FUNCTION june_tid(t text) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN t ~ '^[0-9a-f]{32}$' THEN decode(t, 'hex')
              WHEN octet_length(t) = 15 THEN '\xffff'::bytea || convert_to(t, 'UTF8')
              ELSE '\xff'::bytea || convert_to(t, 'UTF8') END
$$;
CREATE OR REPLACE FUNCTION june_tid_text(b bytea) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN length(b) = 16 THEN encode(b, 'hex') ELSE convert_from(ltrim(b, '\xff'::bytea), 'UTF8') END
$$;
CREATE OR REPLACE FUNCTION june_step_recorded(turn text, step text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'turn %: step % is already recorded', turn, step USING ERRCODE = 'JUNE3';
END
$$;
"""
PG_DROP = ("DROP TRIGGER IF EXISTS june_audit_append_only ON sessions_app_auditevent; "
           "DROP FUNCTION IF EXISTS june_audit_append_only(); "
           "DROP FUNCTION IF EXISTS june_step_recorded(text, text); DROP FUNCTION IF EXISTS june_tid_text(bytea); "
           "DROP FUNCTION IF EXISTS june_tid(text); "
           "DROP FUNCTION IF EXISTS june_start_refused(boolean, boolean, boolean); "
           "DROP FUNCTION IF EXISTS june_lease_lost(text, text)")
PG_NO_LIKE = ("DO $$ DECLARE i text; BEGIN FOR i IN SELECT indexname FROM pg_indexes WHERE tablename = "
              "'sessions_app_turn' AND indexname LIKE 'sessions_app_turn_id_%_like' LOOP "
              "EXECUTE format('DROP INDEX %I', i); END LOOP; END $$")

#: SQLite: the tables made anew (empty: this runs on a new database), then the turn's indexes
SQLITE_TABLES = [
    'CREATE TABLE "sessions_app_turn" ("id" varchar(32) NOT NULL PRIMARY KEY, "order" bigint NOT NULL, "generation" integer NOT NULL, "status" varchar(16) NOT NULL, "kind" varchar(16) NOT NULL, "source" varchar(32) NOT NULL, "input" text NOT NULL CHECK ((JSON_VALID("input") OR "input" IS NULL)), "policy" text NULL CHECK ((JSON_VALID("policy") OR "policy" IS NULL)), "cancel_reason" varchar(16) NULL, "lease_owner" varchar(200) NULL, "lease_expires_at" real NULL, "attempt_id" varchar(32) NULL, "revision" integer NOT NULL, "attempts" integer NOT NULL, "phase" varchar(32) NULL, "journal" text NOT NULL CHECK ((JSON_VALID("journal") OR "journal" IS NULL)), "pending" text NULL CHECK ((JSON_VALID("pending") OR "pending" IS NULL)), "text" text NOT NULL, "error" text NULL CHECK ((JSON_VALID("error") OR "error" IS NULL)), "usage" text NOT NULL CHECK ((JSON_VALID("usage") OR "usage" IS NULL)), "created_at" datetime NOT NULL, "updated_at" datetime NOT NULL, "created_by_id" {user_fk} NULL REFERENCES "{user_table}" ("{user_pk}") DEFERRABLE INITIALLY DEFERRED, "session_id" bigint NOT NULL REFERENCES "sessions_app_session" ("id") DEFERRABLE INITIALLY DEFERRED, "spawn_step" varchar(300) NOT NULL, "depth" integer NOT NULL, "waiting" integer NOT NULL, "parent_id" varchar(32) NULL, "opening" integer NULL, "started_at" datetime NULL, "ended_at" datetime NULL);',
    'CREATE TABLE "sessions_app_message" ("session_id" bigint NOT NULL REFERENCES "sessions_app_session" ("id") DEFERRABLE INITIALLY DEFERRED, "generation" integer NOT NULL, "index" integer NOT NULL, "turn_id" varchar(32) NULL, "role" varchar(16) NOT NULL, "data" text NOT NULL CHECK ((JSON_VALID("data") OR "data" IS NULL)), "step" varchar(300) NULL, "created_at" datetime NOT NULL, PRIMARY KEY ("session_id", "generation", "index"));',
    'CREATE TABLE "sessions_app_event" ("generation" integer NOT NULL, "seq" bigint NOT NULL, "data" text NOT NULL CHECK ((JSON_VALID("data") OR "data" IS NULL)), "created_at" datetime NULL, "session_id" bigint NOT NULL REFERENCES "sessions_app_session" ("id") DEFERRABLE INITIALLY DEFERRED, "turn_id" varchar(32) NULL, "type" smallint NOT NULL, PRIMARY KEY ("session_id", "generation", "seq")) WITHOUT ROWID;',
]
SQLITE_INDEXES = [
    'CREATE INDEX "sessions_ap_session_c5ebd8_idx" ON "sessions_app_turn" ("session_id", "status", "order");',
    'CREATE INDEX "turn_status_created" ON "sessions_app_turn" ("status", "created_at");',
    'CREATE INDEX "turn_waiting" ON "sessions_app_turn" ("session_id") WHERE "waiting" > 0;',
    'CREATE INDEX "turn_chain" ON "sessions_app_turn" ("session_id", "order") WHERE "status" IN (\'queued\', \'running\', \'suspended\');',
    'CREATE INDEX "turn_parent" ON "sessions_app_turn" ("parent_id") WHERE "parent_id" IS NOT NULL;',
    'CREATE INDEX "turn_created_by" ON "sessions_app_turn" ("created_by_id", "created_at") WHERE "created_by_id" IS NOT NULL;',
    'CREATE INDEX "turn_created_at" ON "sessions_app_turn" ("created_at");',
]
SQLITE_REMADE = ("sessions_app_event", "sessions_app_message", "sessions_app_turn")


OLD_CHAIN = ("This database was made by June's migrations before 0.3.0, which were reset (CHANGELOG.md): "
             "there is no upgrade path. Make a new database (the embedded default: delete var/june.sqlite3) "
             "and run migrate again.")


def _made_by_the_old_chain(connection) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM django_migrations WHERE app = 'sessions_app' AND name = '0024_notifications'")
        return cur.fetchone() is not None


def forwards(apps, schema_editor):
    if _made_by_the_old_chain(schema_editor.connection):
        raise RuntimeError(OLD_CHAIN)
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(PG_FUNCTIONS, params=None)  # no placeholders: RAISE has its own %
        schema_editor.execute(PG_NO_LIKE, params=None)
    elif vendor == "sqlite":
        for table in SQLITE_REMADE:
            if schema_editor.connection.cursor().execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone():
                raise RuntimeError(f"{table} holds rows: 0002 runs on a new database only")
            schema_editor.execute(f'DROP TABLE "{table}"')
        # the project's user model (``AUTH_USER_MODEL``: a host's own table and key)
        user = apps.get_model(settings.AUTH_USER_MODEL)._meta
        names = {"user_table": user.db_table, "user_pk": user.pk.column,
                 "user_fk": user.pk.rel_db_type(schema_editor.connection)}
        for statement in SQLITE_TABLES:
            for name, value in names.items():
                statement = statement.replace("{%s}" % name, value)
            schema_editor.execute(statement)
        for statement in SQLITE_INDEXES:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PG_DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0001_initial"), migrations.swappable_dependency(settings.AUTH_USER_MODEL)]
    operations = [migrations.RunPython(forwards, backwards)]
