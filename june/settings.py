"""June's settings, for this repository's site and for a host project alike.

A host project adds June's apps and lets these helpers fill in the rest (docs/install.md)::

    from june import settings as june

    INSTALLED_APPS += june.INSTALLED_APPS            # June's apps and the ones they need
    Q_CLUSTER = june.q_cluster()                     # django-q2, with June's defaults
    CHANNEL_LAYERS = june.channel_layers()           # Redis if REDIS_URL is set, else unix sockets

A SQLite database whose ``OPTIONS`` leave them out gets June's (``SQLITE_OPTIONS``: WAL, ``BEGIN
IMMEDIATE``, a 30 s busy timeout) when June's apps load; ``JUNE_SQLITE_OPTIONS = False`` keeps
startproject's.

Every ``JUNE_*`` setting is optional: a name the host's settings do not define takes its value
from ``june_settings()`` when June's apps load (``install_defaults``), that is from a
``JUNE_*`` environment variable or June's default. Only the database is truly the host's.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Mapping

from django.core.exceptions import ImproperlyConfigured

#: the apps a project adds for June (``INSTALLED_APPS += june.INSTALLED_APPS``): Channels (the
#: websockets), django-q2 (the worker queue), June's two apps, and Swagger UI's static files for
#: the API's docs page (drf-spectacular-sidecar: an app of static files only, no DRF)
INSTALLED_APPS = ["channels", "django_q", "agents_app", "sessions_app", "drf_spectacular_sidecar"]

#: what a SQLite database gets unless its ``OPTIONS`` set their own: concurrent readers beside one
#: writer (WAL), a transaction that takes the write lock when it begins (so a writer waits for
#: the lock instead of failing with "database is locked" half-way), and 30 s of waiting for it.
#: Startproject's defaults refused 17 of 25 concurrent turn starts with a 503.
SQLITE_OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}


def tune_sqlite(databases: Mapping[str, dict[str, Any]]) -> None:
    """Give each SQLite database of ``databases`` the ``SQLITE_OPTIONS`` it does not set (June's
    apps call this when they load, before any connection opens)."""
    for conf in databases.values():
        if conf.get("ENGINE") == "django.db.backends.sqlite3":
            options = conf.setdefault("OPTIONS", {})
            for name, value in SQLITE_OPTIONS.items():
                options.setdefault(name, value)


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    """A yes or a no; anything else is a typo (``JUNE_RATE_LIMITS=ture`` turned the limits off)."""
    value = (env.get(name) or "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off, not {env[name]!r}")


def _number(env: Mapping[str, str], name: str, default: Any, kind: type) -> Any:
    """``name``'s value as ``kind`` (int or float); unset or empty: ``default`` (None stays None).
    A value that is no number names its variable (not a bare ValueError from the settings)."""
    value = (env.get(name) or "").strip()
    if not value:
        return default if default is None else kind(default)
    try:
        return kind(value)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise ImproperlyConfigured(f"{name} must be {what}, not {env[name]!r}") from None


def _int(env: Mapping[str, str], name: str, default: Any) -> int:
    return _number(env, name, default, int)


def _float(env: Mapping[str, str], name: str, default: Any) -> Any:
    return _number(env, name, default, float)


def _json(env: Mapping[str, str], name: str, default: dict[str, Any]) -> dict[str, Any]:
    """A JSON object (``JUNE_MODEL_PRICES='{"…": {…}}'``); unset or empty: ``default``."""
    value = (env.get(name) or "").strip()
    if not value:
        return default
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON ({exc}): {value[:80]!r}") from None
    if not isinstance(parsed, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object ({{…}}), not {value[:80]!r}")
    return parsed


def _list(env: Mapping[str, str], name: str, default: str) -> list[str]:
    return [v.strip() for v in env.get(name, default).split(",") if v.strip()]


def _prefixed(env: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {name[len(prefix) :]: value for name, value in env.items() if name.startswith(prefix) and value}


def june_environment() -> dict[str, str]:
    """The process's ``JUNE_*`` environment variables (``checks.misspelt_env`` judges their names)."""
    return {name: value for name, value in os.environ.items() if name.startswith("JUNE_")}


def june_settings(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every ``JUNE_*`` setting, from ``env`` (the process's environment by default)."""
    env = os.environ if env is None else env
    # the demo agents (agents_app/agents/: ops, researcher): on in this repository's site
    JUNE_DEMO_AGENTS = _bool(env, "JUNE_DEMO_AGENTS", False)
    # django-q2's result row for each run_turn task (a write and a prune of the result table per
    # task in the cluster's monitor); the turn's own row is its record: not kept unless asked
    JUNE_Q_SAVE_TURNS = _bool(env, "JUNE_Q_SAVE_TURNS", False)
    # on PostgreSQL, while the queue's LISTEN connection is up, an idle cluster looks at the
    # queue this often (a NOTIFY ends the wait at once): JUNE_Q_POLL's looks were most of an
    # idle site's CPU
    JUNE_Q_LISTEN_POLL = _float(env, "JUNE_Q_LISTEN_POLL", "1")
    # ``POST …/turns?wait=false`` requests a web process serves at once, each on a thread of a
    # pool of this size (the others wait in order; sessions_app/web/startgate.py)
    JUNE_WEB_STARTS = _int(env, "JUNE_WEB_STARTS", "10")
    JUNE_AGENT_DIRS = _list(env, "JUNE_AGENT_DIRS", "")
    JUNE_LEASE_SECONDS = _float(env, "JUNE_LEASE_SECONDS", "10")
    JUNE_MAX_ATTEMPTS = _int(env, "JUNE_MAX_ATTEMPTS", "5")
    # subagents (docs/subagents.md): how deep a tree of turns may grow, how many children one tool call may spawn
    JUNE_SUBAGENT_MAX_DEPTH = _int(env, "JUNE_SUBAGENT_MAX_DEPTH", "3")
    JUNE_SUBAGENT_MAX_FANOUT = _int(env, "JUNE_SUBAGENT_MAX_FANOUT", "8")
    # what one turn may spend, for agents that declare no ``limits`` (agents_app/runtime/limits.py):
    # JSON, e.g. {"model_calls": 50, "tokens": 200000}; a turn at a limit answers without tools
    JUNE_TURN_LIMITS = _json(env, "JUNE_TURN_LIMITS", {"model_calls": 50})
    # per-user rate limits and quotas (sessions_app/quotas.py), checked before a turn is created;
    # 0 turns one off, JUNE_RATE_LIMITS=0 all of them (benches and load tests)
    JUNE_RATE_LIMITS = _bool(env, "JUNE_RATE_LIMITS", True)
    JUNE_RATE_TURNS_PER_MINUTE = _int(env, "JUNE_RATE_TURNS_PER_MINUTE", "30")
    JUNE_QUOTA_TOKENS_PER_DAY = _int(env, "JUNE_QUOTA_TOKENS_PER_DAY", "5000000")
    JUNE_QUOTA_AGENT_TOKENS_PER_DAY = _int(env, "JUNE_QUOTA_AGENT_TOKENS_PER_DAY", "50000000")
    JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE = _int(env, "JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE", "60")
    JUNE_RATE_SCHEDULE_TURNS_PER_HOUR = _int(env, "JUNE_RATE_SCHEDULE_TURNS_PER_HOUR", "60")
    # how long a process takes an API token (and its user) as it read them: a token revoked or a
    # user deactivated elsewhere is refused within this time (0: read at every request)
    JUNE_TOKEN_CACHE_SECONDS = _float(env, "JUNE_TOKEN_CACHE_SECONDS", "5")
    # how long a process reuses a user's or an agent's tokens of today (every turn of the day is summed)
    JUNE_QUOTA_CACHE_SECONDS = _float(env, "JUNE_QUOTA_CACHE_SECONDS", "10")
    # the lease watchdog in every worker process: seconds between sweeps of expired leases (0 = off)
    JUNE_SWEEP_SECONDS = _float(env, "JUNE_SWEEP_SECONDS", "1")
    # notifications (sessions_app.notify, docs/operations.md): on/off, and seconds between their
    # passes in each worker's sweeper thread (the other JUNE_NOTIFY_* are read by notify.config)
    JUNE_NOTIFY_ENABLED = _bool(env, "JUNE_NOTIFY_ENABLED", True)
    JUNE_NOTIFY_SECONDS = _float(env, "JUNE_NOTIFY_SECONDS", "15")
    # the scheduled sweeper (django-q2 schedule, created by migrate): minutes between runs
    JUNE_SWEEP_MINUTES = _int(env, "JUNE_SWEEP_MINUTES", "1")
    # a re-enqueued turn not claimed within this many seconds is re-enqueued again
    JUNE_REDELIVER_AFTER = _float(env, "JUNE_REDELIVER_AFTER", "30")
    # a queued turn, first of its chain, whose task a cluster took this many seconds ago without
    # claiming the turn (or that has no task) is re-enqueued by the watchdog; at most once per this
    # window. By default the lease: a taken task is a lease nobody renews (docs/workers.md)
    JUNE_REQUEUE_AFTER = _float(env, "JUNE_REQUEUE_AFTER", JUNE_LEASE_SECONDS)
    if JUNE_REQUEUE_AFTER <= 0:
        raise ImproperlyConfigured(
            "JUNE_REQUEUE_AFTER must be positive (else every watchdog pass re-enqueues every taken task)"
        )
    JUNE_EMBEDDED = _bool(env, "JUNE_EMBEDDED", False)
    # SQLite databases get June's options (SQLITE_OPTIONS above) where theirs leave them out
    JUNE_SQLITE_OPTIONS = _bool(env, "JUNE_SQLITE_OPTIONS", True)
    # many turns per worker process (docs/workers.md): how many turns one worker process's runner
    # drives at once, the threads its sync tools and Django-connection calls run on (each keeps a
    # connection), and its own PostgreSQL connections for the units that run no tool code
    JUNE_TURNS_PER_WORKER = _int(env, "JUNE_TURNS_PER_WORKER", "200")
    JUNE_WORKER_THREADS = _int(env, "JUNE_WORKER_THREADS", "8")
    JUNE_WORKER_DB_CONNECTIONS = _int(env, "JUNE_WORKER_DB_CONNECTIONS", "2")
    if min(JUNE_TURNS_PER_WORKER, JUNE_WORKER_THREADS, JUNE_WORKER_DB_CONNECTIONS) < 1:
        raise ImproperlyConfigured(
            "JUNE_TURNS_PER_WORKER, JUNE_WORKER_THREADS and JUNE_WORKER_DB_CONNECTIONS must be >= 1"
        )
    # a runner whose loop runs late by more than this (seconds, smoothed) takes no new turn until it
    # catches up (docs/workers.md "A burst"); 0 = off
    JUNE_RUNNER_BUSY_LAG = _float(env, "JUNE_RUNNER_BUSY_LAG", "0.02")
    if not JUNE_RUNNER_BUSY_LAG >= 0:
        raise ImproperlyConfigured("JUNE_RUNNER_BUSY_LAG must be >= 0")
    # the runner's event loop (docs/workers.md): "uvloop" (libuv's, where the package is
    # installed: it is on Linux and macOS) or "asyncio" (the standard library's)
    JUNE_EVENT_LOOP = (env.get("JUNE_EVENT_LOOP") or "uvloop").strip().lower()
    if JUNE_EVENT_LOOP not in ("uvloop", "asyncio"):
        raise ImproperlyConfigured(f"JUNE_EVENT_LOOP must be 'uvloop' or 'asyncio', not {JUNE_EVENT_LOOP!r}")
    # checkpoints as prepared statements on PostgreSQL (turn off behind a transaction-mode pooler
    # that cannot keep prepared statements)
    JUNE_PREPARED_CHECKPOINTS = _bool(env, "JUNE_PREPARED_CHECKPOINTS", True)
    JUNE_MAX_TEXT_CHARS = _int(env, "JUNE_MAX_TEXT_CHARS", "32000")
    # attachments (README "Attachments"): the largest file, and how many files one message carries
    JUNE_ATTACHMENT_MAX_BYTES = _int(env, "JUNE_ATTACHMENT_MAX_BYTES", str(5 * 1024 * 1024))
    JUNE_ATTACHMENTS_PER_MESSAGE = _int(env, "JUNE_ATTACHMENTS_PER_MESSAGE", "5")
    # the largest request body on a path whose view declares none of its own (an attachment's
    # upload, a multipart start and the webhook do): a larger one is refused (413) before it is
    # read (sessions_app/web/bodylimit.py; docs/operations.md "Request bodies")
    JUNE_MAX_BODY_BYTES = _int(env, "JUNE_MAX_BODY_BYTES", str(1024 * 1024))
    # park notifications (docs/operations.md "Notifications"): at most this many requests of one
    # user's turns are notified per hour (0: no bound); the rest wait in the inbox
    JUNE_NOTIFY_PARKS_PER_USER_HOUR = _int(env, "JUNE_NOTIFY_PARKS_PER_USER_HOUR", "10")
    # open chat websockets one user may hold in one web process (0: no bound); more are closed 4429
    JUNE_WS_MAX_PER_USER = _int(env, "JUNE_WS_MAX_PER_USER", "20")
    # an upload never sent with a message is deleted (row and file) by the sweeper after this long
    JUNE_UNSENT_ATTACHMENT_HOURS = _float(env, "JUNE_UNSENT_ATTACHMENT_HOURS", "24")
    # retention (docs/privacy.md): the site's default for agents that declare none, JSON, e.g.
    # {"sessions_days": 365, "archived_days": 90, "attachments_days": 30}; {} keeps everything.
    # The privacy sweep runs every JUNE_RETENTION_MINUTES and deletes at most
    # JUNE_RETENTION_BATCH sessions (and as many archived generations) per agent per pass
    JUNE_RETENTION = _json(env, "JUNE_RETENTION", {})
    JUNE_RETENTION_MINUTES = _int(env, "JUNE_RETENTION_MINUTES", "60")
    JUNE_RETENTION_BATCH = _int(env, "JUNE_RETENTION_BATCH", "100")
    # the audit log (docs/privacy.md): its rows older than this many days are deleted by the
    # privacy sweep; 0 keeps every row
    JUNE_AUDIT_RETENTION_DAYS = _float(env, "JUNE_AUDIT_RETENTION_DAYS", "0")
    # the HTTP API and SSE (docs/api.md)
    JUNE_API_WAIT_SECONDS = _float(env, "JUNE_API_WAIT_SECONDS", "120")
    JUNE_API_STREAM_SECONDS = _float(env, "JUNE_API_STREAM_SECONDS", "3600")
    JUNE_SSE_KEEPALIVE_SECONDS = _float(env, "JUNE_SSE_KEEPALIVE_SECONDS", "15")
    #: how often a stream re-reads the log when the live channel is silent (default: 0.25 s on a
    #: layer inside this process, else 2 s)
    JUNE_SSE_POLL_SECONDS = _float(env, "JUNE_SSE_POLL_SECONDS", None)
    # webhook deliveries (docs/proactive.md)
    JUNE_WEBHOOK_RETRIES = _int(env, "JUNE_WEBHOOK_RETRIES", "5")
    JUNE_WEBHOOK_BACKOFF = _float(env, "JUNE_WEBHOOK_BACKOFF", "1.0")
    #: how long a schedule's firing worker waits for its turn to settle
    JUNE_SCHEDULE_TURN_TIMEOUT = _float(env, "JUNE_SCHEDULE_TURN_TIMEOUT", "900")
    # US dollars per million tokens by model id (or id prefix), merged over the defaults in
    # sessions_app/admin/console.py (Anthropic list prices, zero for demo): e.g.
    # JUNE_MODEL_PRICES='{"claude-sonnet-4": {"input": 3, "output": 15}}'
    JUNE_MODEL_PRICES = _json(env, "JUNE_MODEL_PRICES", {})
    # Message Batches (agents with ``batch = True``, docs/providers.md): the share of the list
    # price a batched call costs, seconds between the poller's passes in each worker's sweeper
    # thread, the most requests one pass sends or reads, and how long a pass that took rows to
    # send may take before another looks for the batch it may have created
    JUNE_BATCH_PRICE_FACTOR = _float(env, "JUNE_BATCH_PRICE_FACTOR", "0.5")
    JUNE_BATCH_POLL_SECONDS = _float(env, "JUNE_BATCH_POLL_SECONDS", "30")
    JUNE_BATCH_POLL_LIMIT = _int(env, "JUNE_BATCH_POLL_LIMIT", "1000")
    JUNE_BATCH_SUBMIT_GRACE = _float(env, "JUNE_BATCH_SUBMIT_GRACE", "120")
    if not 0 <= JUNE_BATCH_PRICE_FACTOR <= 1 or JUNE_BATCH_POLL_LIMIT < 1 or JUNE_BATCH_SUBMIT_GRACE <= 0:
        raise ImproperlyConfigured(
            "JUNE_BATCH_PRICE_FACTOR must be in [0, 1], JUNE_BATCH_POLL_LIMIT >= 1, JUNE_BATCH_SUBMIT_GRACE > 0"
        )

    # the demo's MCP inventory server (docs/tools.md), and the site's own files (a project's
    # settings set it to their var directory): the demo inventory's file is there
    JUNE_DEMO_MCP = _bool(env, "JUNE_DEMO_MCP", False)
    JUNE_VAR_DIR = env.get("JUNE_VAR_DIR") or "var"

    # MCP servers (docs/tools.md): seconds a call may take (a server entry's ``timeout`` overrides
    # it), and seconds a server's tool list is kept before it is fetched again
    JUNE_MCP_TIMEOUT = _float(env, "JUNE_MCP_TIMEOUT", "30")
    JUNE_MCP_TOOLS_TTL = _float(env, "JUNE_MCP_TOOLS_TTL", "300")
    if not 0 < JUNE_MCP_TIMEOUT <= 3600 or JUNE_MCP_TOOLS_TTL < 0:
        raise ImproperlyConfigured("JUNE_MCP_TIMEOUT must be in (0, 3600] and JUNE_MCP_TOOLS_TTL >= 0")
    # the model provider of every agent ("" = each agent's own: ``anthropic`` when
    # ANTHROPIC_API_KEY is set, else ``demo``; agents_app/providers)
    JUNE_MODEL = env.get("JUNE_MODEL", "")
    # the demo model's and demo tools' pace (seconds per streamed piece; None: their defaults),
    # the essay's (slower, to be cancelled mid-stream), and the demo logins' password (june_demo;
    # "": a new one on every start)
    JUNE_DEMO_DELAY = _float(env, "JUNE_DEMO_DELAY", None)
    JUNE_DEMO_ESSAY_DELAY = _float(env, "JUNE_DEMO_ESSAY_DELAY", None)
    JUNE_DEMO_PASSWORD = env.get("JUNE_DEMO_PASSWORD", "")
    # notifications (sessions_app.notify, docs/operations.md "Notifications"): mail the users who
    # may answer; a Slack/Teams incoming webhook ("" = none); the site's URL, prefixed to links
    JUNE_NOTIFY_EMAIL = _bool(env, "JUNE_NOTIFY_EMAIL", True)
    JUNE_NOTIFY_WEBHOOK_URL = env.get("JUNE_NOTIFY_WEBHOOK_URL", "")
    JUNE_NOTIFY_BASE_URL = env.get("JUNE_NOTIFY_BASE_URL", "").rstrip("/")
    # seconds: a reminder after (0 = none), failures batched this long, the first retry's delay
    # (doubled each time, up to the cap), a webhook POST's timeout, the failures' look back
    JUNE_NOTIFY_REMIND_AFTER = _float(env, "JUNE_NOTIFY_REMIND_AFTER", "3600")
    JUNE_NOTIFY_DIGEST_SECONDS = _float(env, "JUNE_NOTIFY_DIGEST_SECONDS", "900")
    JUNE_NOTIFY_BACKOFF = _float(env, "JUNE_NOTIFY_BACKOFF", "30")
    JUNE_NOTIFY_BACKOFF_CAP = _float(env, "JUNE_NOTIFY_BACKOFF_CAP", "3600")
    JUNE_NOTIFY_TIMEOUT = _float(env, "JUNE_NOTIFY_TIMEOUT", "10")
    JUNE_NOTIFY_LOOKBACK = _float(env, "JUNE_NOTIFY_LOOKBACK", "900")
    # attempts before a notification is given up; failed runs in a row before a schedule is reported
    JUNE_NOTIFY_MAX_ATTEMPTS = _int(env, "JUNE_NOTIFY_MAX_ATTEMPTS", "8")
    JUNE_NOTIFY_SCHEDULE_FAILURES = _int(env, "JUNE_NOTIFY_SCHEDULE_FAILURES", "3")
    # webhooks (docs/proactive.md): each agent's signing secret and delivery URL, by agent name,
    # from JUNE_WEBHOOK_SECRET_<AGENT> / JUNE_WEBHOOK_URL_<AGENT> (<AGENT>: the name in capitals,
    # other characters as "_")
    JUNE_WEBHOOK_SECRETS = _prefixed(env, "JUNE_WEBHOOK_SECRET_")
    JUNE_WEBHOOK_URLS = _prefixed(env, "JUNE_WEBHOOK_URL_")
    # traces as JSON lines to this file (tests; docs/operations.md "Traces"), beside OTEL_*
    JUNE_OTEL_TEST_FILE = env.get("JUNE_OTEL_TEST_FILE", "")

    # health (docs/operations.md "Health"): the time /readyz's checks get, and how often each worker
    # process writes its heartbeat (a worker not seen for 3 beats is shown as gone)
    JUNE_HEALTH_TIMEOUT = _float(env, "JUNE_HEALTH_TIMEOUT", "2")
    JUNE_WORKER_BEAT_SECONDS = _float(env, "JUNE_WORKER_BEAT_SECONDS", "5")
    if JUNE_HEALTH_TIMEOUT <= 0 or JUNE_WORKER_BEAT_SECONDS <= 0:
        raise ImproperlyConfigured("JUNE_HEALTH_TIMEOUT and JUNE_WORKER_BEAT_SECONDS must be positive")
    # a negative limit or quota would read as 0, which turns it off: a typo must not open the gates
    limits = {
        "JUNE_RATE_TURNS_PER_MINUTE": JUNE_RATE_TURNS_PER_MINUTE,
        "JUNE_QUOTA_TOKENS_PER_DAY": JUNE_QUOTA_TOKENS_PER_DAY,
        "JUNE_QUOTA_AGENT_TOKENS_PER_DAY": JUNE_QUOTA_AGENT_TOKENS_PER_DAY,
        "JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE": JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE,
        "JUNE_RATE_SCHEDULE_TURNS_PER_HOUR": JUNE_RATE_SCHEDULE_TURNS_PER_HOUR,
        "JUNE_WS_MAX_PER_USER": JUNE_WS_MAX_PER_USER,
        "JUNE_NOTIFY_PARKS_PER_USER_HOUR": JUNE_NOTIFY_PARKS_PER_USER_HOUR,
    }
    for limit_name, limit in limits.items():
        if limit < 0:
            raise ImproperlyConfigured(f"{limit_name} must be 0 (off) or more, not {limit}")
    return {name: value for name, value in locals().items() if name.startswith("JUNE_")}


def install_defaults(settings: Any) -> None:
    """Give every ``JUNE_*`` setting the host did not define its value (June's apps call this
    when they load, before any module reads a setting)."""
    for name, value in june_settings().items():
        if not hasattr(settings, name):
            setattr(settings, name, value)


def q_cluster(
    env: Mapping[str, str] | None = None, *, database_engine: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """django-q2's ``Q_CLUSTER`` with June's defaults (docs/workers.md), from ``JUNE_Q_*``
    variables; ``overrides`` last. ORM broker: at-least-once (a task whose worker died is taken
    again after ``retry``; the lease sweeper re-enqueues the turn much sooner). timeout < retry
    so a running task is never handed out twice; ``poll`` is how long an idle cluster sleeps
    between looks at the queue. On PostgreSQL the ORM broker is woken by LISTEN/NOTIFY, on SQLite
    it looks only when another connection committed: without ``database_engine`` (a project's
    settings need no ``DATABASES`` above this call) the broker is June's, which looks at the
    connection's vendor when it runs and is django-q2's own ORM broker elsewhere; with it, June's
    broker only for PostgreSQL and SQLite."""
    env = os.environ if env is None else env
    workers = _int(env, "JUNE_Q_WORKERS", "2")
    cluster: dict[str, Any] = {
        "name": env.get("JUNE_Q_NAME", "june"),
        "orm": "default",
        "workers": workers,
        "timeout": _int(env, "JUNE_Q_TIMEOUT", "1800"),
        "retry": _int(env, "JUNE_Q_RETRY", "1860"),
        "max_attempts": _int(env, "JUNE_Q_MAX_ATTEMPTS", "3"),
        "ack_failures": True,
        "poll": _float(env, "JUNE_Q_POLL", "0.05"),
        # a cluster holds at most this many fetched-but-unstarted tasks (locked for ``retry``)
        "queue_limit": _int(env, "JUNE_Q_QUEUE_LIMIT", str(workers)),
        "catch_up": False,
        "save_limit": 1000,
        # a worker process is retired after this many tasks (0: never); it exits once the turns
        # its runner drives have ended
        "recycle": _int(env, "JUNE_Q_RECYCLE", "0"),
        "label": "Django Q2",
        "sync": _bool(env, "JUNE_Q_SYNC", False),
    }
    broker = env.get("JUNE_Q_BROKER", "")
    if not broker and database_engine in (None, "django.db.backends.postgresql", "django.db.backends.sqlite3"):
        broker = "sessions_app.workers.broker.NotifyingORM"
    if broker:
        cluster["broker_class"] = broker
    cluster.update(overrides)
    if cluster["timeout"] >= cluster["retry"]:
        raise ImproperlyConfigured(
            "JUNE_Q_TIMEOUT must be below JUNE_Q_RETRY (else a running task is handed out twice)"
        )
    return cluster


def channel_layers(env: Mapping[str, str] | None = None, *, var_dir: str | Path | None = None) -> dict[str, Any]:
    """``CHANNEL_LAYERS``: Redis when ``REDIS_URL`` is set, else June's unix-socket layer in
    ``var_dir``/channels (no server: daphne and the workers of one machine)."""
    env = os.environ if env is None else env
    redis_url = env.get("REDIS_URL", "")
    if redis_url:
        if importlib.util.find_spec("channels_redis") is None:
            raise ImproperlyConfigured(
                "REDIS_URL is set, and the Redis channel layer is not installed: pip install 'june-django[redis]'"
            )
        # socket_timeout above channels_redis's 5 s blocking pop: redis-py 8 defaults to 5 s,
        # which turns every idle websocket's receive into a TimeoutError (a 1011 close)
        # prefix: the keys of one site (several sites, or test runs, may share one Redis)
        return {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {
                    "hosts": [{"address": redis_url, "socket_timeout": 30}],
                    "capacity": 1000,
                    "expiry": 30,
                    "prefix": env.get("JUNE_CHANNEL_PREFIX", "asgi"),
                },
            }
        }
    folder = Path(var_dir if var_dir is not None else env.get("JUNE_VAR_DIR", "var")) / "channels"
    return {
        "default": {
            "BACKEND": "sessions_app.outbox.layers.UnixSocketChannelLayer",
            "CONFIG": {"path": str(folder), "capacity": 1000, "expiry": 30},
        }
    }
