"""What the benchmarks share: a fresh database for each run, and the physical floor (one
transaction of three small statements through the driver the store uses) that every per-step
figure is compared with, measured in the same run."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import tempfile
import time


def use_database(name: str, *, postgres_by_default: bool = False) -> None:
    """Before Django is set up: point DATABASE_URL at database ``name`` on the PostgreSQL server
    it names (or on the local one, ``postgres_by_default``), else JUNE_VAR_DIR at a new folder so
    SQLite starts from an empty file; plus the settings a bench needs."""
    url = os.environ.get("DATABASE_URL") or (
        "postgres://postgres@127.0.0.1:5432/postgres" if postgres_by_default else ""
    )
    if url.startswith("postgres"):
        os.environ["DATABASE_URL"] = f"{url.rsplit('/', 1)[0]}/{name}"
        os.environ.setdefault("JUNE_VAR_DIR", tempfile.mkdtemp(prefix=f"{name}-"))
    else:
        os.environ.pop("DATABASE_URL", None)
        os.environ["JUNE_VAR_DIR"] = tempfile.mkdtemp(prefix=f"{name}-")
    os.environ.setdefault("SECRET_KEY", name)
    # benches start turns far faster than people do: no rate limits or quotas unless asked
    os.environ.setdefault("JUNE_RATE_LIMITS", "0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")


def use_cluster_database(name: str) -> None:
    """``use_database`` (PostgreSQL by default) for a bench that runs real worker clusters on
    the fault tests' agent (tests/fault/agents: ``faultagent``'s scripted short turns)."""
    from pathlib import Path

    use_database(name, postgres_by_default=True)
    fault = Path(__file__).resolve().parent.parent / "tests" / "fault"
    os.environ["JUNE_AGENT_DIRS"] = f"{fault / 'agents'},{fault / 'batch_agents'}"
    os.environ.setdefault("JUNE_FAULT_DIR", tempfile.mkdtemp(prefix="june-bench-fault-"))


def fresh_database(name: str) -> None:
    """Drop and recreate ``name`` on PostgreSQL (DATABASE_URL already points at it), then set
    Django up and migrate. On SQLite the caller points JUNE_VAR_DIR at a new folder."""
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        with _server()[0] as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _server():
    """(an autocommit connection to the ``postgres`` database of DATABASE_URL's server, the name
    of the database DATABASE_URL names)."""
    import psycopg

    server, name = os.environ["DATABASE_URL"].split("?", 1)[0].rsplit("/", 1)
    return psycopg.connect(server + "/postgres", autocommit=True), name


def ensure_database() -> None:
    """Create the PostgreSQL database DATABASE_URL names when it does not exist (its rows, when
    it does, are kept)."""
    conn, name = _server()
    with conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def wal_frames() -> int | None:
    """SQLite: the frames (pages) the WAL holds now, from the WAL-index header in the ``-shm``
    file (``mxFrame``, a native-order u32 at byte 16: https://sqlite.org/walformat.html); None
    on PostgreSQL or before the file exists. The count restarts at 0 when a checkpoint lets the
    WAL start over, so a caller drops a difference that comes out negative."""
    import struct

    from django.conf import settings

    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        return None
    try:
        with open(f"{db['NAME']}-shm", "rb") as shm:
            header = shm.read(20)
    except OSError:
        return None
    return struct.unpack_from("=I", header, 16)[0] if len(header) == 20 else None


class Floor:
    """The floor's connection, kept open, so a few samples can be taken right beside each
    measured operation (``paired``): on a machine whose floor drifts by the minute, a ratio to
    the floor of the same moment is steadier than one to the run's median."""

    def __init__(self) -> None:
        from django.conf import settings

        db = settings.DATABASES["default"]
        self.postgres = db["ENGINE"].endswith("postgresql")
        if self.postgres:
            import psycopg

            self.conn = psycopg.connect(
                host=db["HOST"],
                port=db["PORT"] or 5432,
                user=db["USER"],
                dbname=db["NAME"],
                password=db.get("PASSWORD") or None,
            )
            self.conn.execute("CREATE TABLE IF NOT EXISTS floor_a (id int primary key, n int)")
            self.conn.execute("CREATE TABLE IF NOT EXISTS floor_b (id serial primary key, v text)")
            self.conn.execute("INSERT INTO floor_a VALUES (1, 0) ON CONFLICT DO NOTHING")
            self.conn.commit()
        else:
            import sqlite3

            self.conn = sqlite3.connect(db["NAME"], isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("CREATE TABLE IF NOT EXISTS floor_a (id int primary key, n int)")
            self.conn.execute("CREATE TABLE IF NOT EXISTS floor_b (id integer primary key, v text)")
            self.conn.execute("INSERT OR IGNORE INTO floor_a VALUES (1, 0)")

    def samples(self, n: int) -> list[float]:
        """``n`` transactions of three small statements, each in ms."""
        conn, times = self.conn, []
        for _ in range(n):
            t = time.perf_counter()
            if self.postgres:
                with conn.transaction():
                    conn.execute("UPDATE floor_a SET n = n + 1 WHERE id = 1")
                    conn.execute("INSERT INTO floor_b (v) VALUES (%s)", ("x" * 100,))
                    conn.execute("INSERT INTO floor_b (v) VALUES (%s)", ("y" * 100,))
            else:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE floor_a SET n = n + 1 WHERE id = 1")
                conn.execute("INSERT INTO floor_b (v) VALUES (?)", ("x" * 100,))
                conn.execute("INSERT INTO floor_b (v) VALUES (?)", ("y" * 100,))
                conn.execute("COMMIT")
            times.append((time.perf_counter() - t) * 1000)
        return times

    def close(self) -> None:
        self.conn.close()


def floor_ms(n: int = 300) -> float:
    """One transaction of three small statements, through the driver the store uses (the
    median of ``n``, on a connection of its own)."""
    floor = Floor()
    try:
        return statistics.median(floor.samples(n))
    finally:
        floor.close()


def start(key: str, text: str, agent: str = "faultagent") -> str:
    """Queue a turn as POST ?wait=false does (the fault-test agent by default)."""
    from sessions_app import services

    return services.turn_start(agent=agent, key=key, text=text, source="http").turn_id


def wait_status(turn_ids, status="completed", timeout=300.0) -> None:
    from sessions_app.models import Turn

    deadline = time.monotonic() + timeout
    while Turn.objects.filter(pk__in=list(turn_ids), status=status).count() < len(turn_ids):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {len(turn_ids)} turns to be {status}")
        time.sleep(0.05)  # figures come from the event log, not from this poll: keep it light


def pg_counters() -> dict[str, int] | None:
    """PostgreSQL: the server's counters of what writes cost, read on a connection of their own
    (None on SQLite). ``xid``: the last transaction id assigned (this read takes one: a write
    transaction gets one, a read-only one none, so the difference of two reads, less one, is the
    write transactions in between); ``wal_bytes``: the WAL's position; ``wal_syncs``: the WAL
    syncs the server did (``pg_stat_wal``: every process's, the WAL writer's background flushes
    of asynchronous commits included, as each process has reported them: see ``settle``)."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return None
    conn = _server()[0]
    with conn:
        xid = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
        wal_bytes = int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])
        wal_syncs = int(conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0])
    return {"xid": xid, "wal_bytes": wal_bytes, "wal_syncs": wal_syncs}


def settle() -> None:
    """Close this process's connections (the store's, and Django's on asgiref's thread) and give
    the server a moment: a server process reports its statistics (``pg_stat_wal``) when its
    client leaves, the WAL writer at most once a second; the next unit opens them again."""
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from sessions_app.store import direct

    direct.close_all()
    SyncToAsync.single_thread_executor.submit(connections.close_all).result()
    time.sleep(1.5)


def stop_group(proc: subprocess.Popen, timeout: float = 20) -> None:
    """Stop a server started in its own process group: SIGTERM to the group, then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)
