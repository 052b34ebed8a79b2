"""The three systems bench/bench_peers.py drives, each behind the same few calls: start its
processes (each in a session of its own, so the bench finds them by process group), the
request that starts one turn, how many turns have ended, when each ended (the system's own
clock: the same machine's), and whether each ran exactly once. Runs in the project's venv;
LangGraph's and DBOS's own code runs in their venvs (``ensure_venv``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import stop_group

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "var" / "peers"
HERE = Path(__file__).resolve().parent
#: each peer's venv: what the bench installs there (PyPI), once
PACKAGES = {
    "langgraph": ["langgraph-cli[inmem]", "langgraph-api", "langchain-anthropic", "psycopg[binary]"],
    "dbos": ["dbos", "fastapi", "uvicorn", "anthropic", "psycopg[binary,pool]"],
}
ORDERS = (
    "CREATE TABLE IF NOT EXISTS bench_orders (key text NOT NULL, item text, quantity int, at timestamptz DEFAULT now())"
)


def ensure_venv(name: str) -> Path:
    """var/peers/<name>: a venv with ``PACKAGES[name]`` (made and installed on first use)."""
    venv = PEERS / name
    stamp = venv / "bench-packages.json"
    if stamp.exists() and json.loads(stamp.read_text()) == PACKAGES[name]:
        return venv
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PACKAGES[name]], check=True)
    stamp.write_text(json.dumps(PACKAGES[name]))
    return venv


#: the databases' names start with this (``BENCH_PEERS_DB``): two sittings on one server keep apart
DB_PREFIX = os.environ.get("BENCH_PEERS_DB", "bench_peers")


def server_url(db: str) -> str:
    base = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
    return f"{base}/{db}"


def fresh_db(db: str) -> None:
    import psycopg

    with psycopg.connect(server_url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")


def query(db: str, sql: str, params: Any = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(server_url(db), autocommit=True, application_name="bench-self") as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description is not None else []


def redis_pid(url: str) -> int:
    """The pid of the Redis server at ``url`` (this machine's: its CPU is read from /proc)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"{url} did not come up:\n{log.read_text()[-3000:]}")
        time.sleep(0.3)  # polling for the server to listen


def spawn(cmd: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def epoch(at: Any) -> float:
    return at.timestamp() if isinstance(at, datetime) else datetime.fromisoformat(str(at)).timestamp()


class System:
    name = ""
    #: the PostgreSQL databases whose backends count as this system's
    databases: tuple[str, ...] = ()
    #: whether the Redis server at REDIS_URL is this system's (its CPU counts as the system's)
    uses_redis = False

    def __init__(self, peer_url: str, orders_db: str) -> None:
        self.peer_url, self.orders_db = peer_url, orders_db
        if self.name != "june":  # its tool's inserts (June's go to its own database)
            self.databases = (*type(self).databases, orders_db)
        self.procs: list[subprocess.Popen] = []
        self.workdir = Path(tempfile.mkdtemp(prefix=f"bench-peers-{self.name}-"))

    def pgids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            stop_group(proc)

    def orders(self, keys: list[str]) -> dict[str, int]:
        rows = query(self.orders_db, "SELECT key, count(*) FROM bench_orders WHERE key = ANY(%s) GROUP BY key", (keys,))
        return dict(rows)


class June(System):
    """daphne + one ``june_worker`` cluster of 2 worker processes, PostgreSQL (+ Redis when
    REDIS_URL is set), the demo ``ops`` agent on the ``anthropic`` provider."""

    name = "june"
    databases = (f"{DB_PREFIX}_june",)
    #: the cluster's settings: the site's defaults (over the fault suites' that ``Clusters`` sets:
    #: a 2 s lease, a 0.3 s sweep), but for room for a burst of 1,000 in two workers
    CLUSTER = {
        "JUNE_Q_WORKERS": "2",
        "JUNE_TURNS_PER_WORKER": "600",
        "JUNE_LEASE_SECONDS": "10",
        "JUNE_SWEEP_SECONDS": "1",
        "JUNE_Q_POLL": "0.05",
        "JUNE_AGENT_DIRS": "",
        "PGAPPNAME": "bench-workers",
    }

    @property
    def uses_redis(self) -> bool:
        return bool(os.environ.get("REDIS_URL"))

    def start(self) -> str:
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from bench.bench_concurrency import start_web
        from sessions_app import models as m
        from tests.fault.qcluster import Clusters, database_url

        user, _ = get_user_model().objects.get_or_create(username="bench")
        self.token = m.ApiToken.issue(user, name="bench")[1]
        common = {
            "JUNE_MODEL": "anthropic",
            "ANTHROPIC_API_KEY": "bench-key",
            "ANTHROPIC_BASE_URL": self.peer_url,
            "LOG_LEVEL": "WARNING",
            "SECRET_KEY": settings.SECRET_KEY,
            "JUNE_RATE_LIMITS": "0",
            "JUNE_CHANNEL_PREFIX": f"bench-peers-{os.getpid()}",
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(common, DATABASE_URL=database_url(), DEBUG="0", JUNE_PROCESS="web", PGAPPNAME="bench-web")
        web, url = start_web(env, self.workdir)
        self.procs.append(web)
        clusters = Clusters(self.workdir, **self.CLUSTER, **common)
        cluster = clusters.start()
        self.procs.append(cluster.proc)
        time.sleep(3)  # the workers' imports
        return url

    def request(self, key: str, text: str) -> tuple[str, dict[str, str], bytes]:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        return f"/api/agents/ops/sessions/{key}/turns?wait=false", headers, json.dumps({"text": text}).encode()

    def done(self, prefix: str) -> int:
        return query(
            self.databases[0],
            "SELECT count(*) FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id "
            "WHERE s.key LIKE %s AND t.ended_at IS NOT NULL",
            (prefix + "%",),
        )[0][0]

    def ended(self, prefix: str, keys: list[str] = ()) -> dict[str, tuple[float, bool]]:
        rows = query(
            self.databases[0],
            "SELECT s.key, t.ended_at, t.status = 'completed' AND t.attempts = 1 FROM sessions_app_turn t "
            "JOIN sessions_app_session s ON s.id = t.session_id WHERE s.key LIKE %s AND t.ended_at IS NOT NULL",
            (prefix + "%",),
        )
        return {key: (epoch(at), ok) for key, at, ok in rows}

    def orders(self, keys: list[str]) -> dict[str, int]:
        rows = query(
            self.databases[0],
            "SELECT s.key, count(*) FROM agents_app_order o JOIN sessions_app_turn t ON t.id = o.turn_id "
            "JOIN sessions_app_session s ON s.id = t.session_id WHERE s.key = ANY(%s) GROUP BY s.key",
            (keys,),
        )
        return dict(rows)


class LangGraph(System):
    """``langgraph dev`` (the in-memory runtime, not durable: runs and checkpoints in the server's
    memory), a prebuilt ReAct agent (``peers/lg_agent.py``), 1,000 jobs at once per worker."""

    name = "langgraph"

    def start(self) -> str:
        venv = ensure_venv("langgraph")
        config = self.workdir / "langgraph.json"
        config.write_text(json.dumps({"dependencies": [str(HERE)], "graphs": {"agent": f"{HERE}/lg_agent.py:graph"}}))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO", "JUNE", "DATABASE"))}
        env.update(
            ANTHROPIC_BASE_URL=self.peer_url,
            BENCH_ORDERS_URL=server_url(self.orders_db),
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGSMITH_TRACING="false",
            PYTHONUNBUFFERED="1",
        )
        log = self.workdir / "langgraph.log"
        cmd = [str(venv / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload", "--allow-blocking"]
        cmd += ["--port", str(port), "--n-jobs-per-worker", "1000", "--config", str(config)]
        cmd += ["--server-log-level", "WARNING"]
        self.procs.append(spawn(cmd, env, log, cwd=self.workdir))
        self.url = f"http://127.0.0.1:{port}"
        wait_http(self.url + "/ok", self.procs[0], log)
        return self.url

    @staticmethod
    def thread(key: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, key))

    def request(self, key: str, text: str) -> tuple[str, dict[str, str], bytes]:
        body = {
            "assistant_id": "agent",
            "input": {"messages": [{"role": "user", "content": text}]},
            "if_not_exists": "create",
            "metadata": {"bench": key, "bench_run": key.rstrip("0123456789")},  # the thread's, too
        }
        return f"/threads/{self.thread(key)}/runs", {"Content-Type": "application/json"}, json.dumps(body).encode()

    def orders(self, keys: list[str]) -> dict[str, int]:
        by_thread = super().orders([self.thread(k) for k in keys])
        return {k: by_thread.get(self.thread(k), 0) for k in keys}

    def done(self, prefix: str) -> int:
        import httpx

        ended = {"metadata": {"bench_run": prefix}}
        count = httpx.post(self.url + "/threads/count", json={**ended, "status": "idle"}, timeout=60).json()
        return int(count) + int(
            httpx.post(self.url + "/threads/count", json={**ended, "status": "error"}, timeout=60).json()
        )

    def ended(self, prefix: str, keys: list[str] = ()) -> dict[str, tuple[float, bool]]:
        """Each thread's last update: its run's end (a thread is updated when its run ends)."""
        import httpx

        threads: list[dict[str, Any]] = []
        while True:
            body = {"metadata": {"bench_run": prefix}, "limit": 1000, "offset": len(threads)}
            page = httpx.post(self.url + "/threads/search", json=body, timeout=120).json()
            if not isinstance(page, list):
                raise SystemExit(f"langgraph /threads/search: {page}")
            threads += page
            if len(page) < 1000:
                break
        return {
            t["metadata"]["bench"]: (epoch(t["updated_at"]), t["status"] == "idle")
            for t in threads
            if t["status"] in ("idle", "error")
        }


class Dbos(System):
    """DBOS Transact 3.x under uvicorn (FastAPI), a durable async workflow per turn
    (``peers/dbos_app.py``), its system database on PostgreSQL."""

    name = "dbos"
    databases = (f"{DB_PREFIX}_dbos",)

    def start(self) -> str:
        venv = ensure_venv("dbos")
        fresh_db(self.databases[0])
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO", "JUNE", "DATABASE"))}
        env.update(
            ANTHROPIC_BASE_URL=self.peer_url,
            BENCH_ORDERS_URL=server_url(self.orders_db),
            BENCH_DBOS_URL=server_url(self.databases[0]),
            PYTHONUNBUFFERED="1",
        )
        log = self.workdir / "dbos.log"
        cmd = [str(venv / "bin" / "python"), "-m", "uvicorn", "dbos_app:app", "--app-dir", str(HERE)]
        cmd += ["--port", str(port), "--backlog", "2048", "--no-access-log", "--log-level", "warning"]
        self.procs.append(spawn(cmd, env, log))
        self.url = f"http://127.0.0.1:{port}"
        wait_http(self.url + "/healthz", self.procs[0], log)
        return self.url

    def request(self, key: str, text: str) -> tuple[str, dict[str, str], bytes]:
        return f"/turns/{key}", {"Content-Type": "application/json"}, json.dumps({"text": text}).encode()

    def done(self, prefix: str) -> int:
        return query(
            self.databases[0],
            "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid LIKE %s AND status IN ('SUCCESS', 'ERROR')",
            (prefix + "%",),
        )[0][0]

    def ended(self, prefix: str, keys: list[str] = ()) -> dict[str, tuple[float, bool]]:
        rows = query(
            self.databases[0],
            "SELECT workflow_uuid, updated_at, status = 'SUCCESS' AND recovery_attempts <= 1 FROM dbos.workflow_status "
            "WHERE workflow_uuid LIKE %s AND status IN ('SUCCESS', 'ERROR')",
            (prefix + "%",),
        )
        return {key: (at / 1000, ok) for key, at, ok in rows}


SYSTEMS = {"june": June, "langgraph": LangGraph, "dbos": Dbos}
