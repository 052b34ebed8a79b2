"""Settings, entirely from the environment (12-factor).

Embedded default (no variables set): SQLite in WAL mode under ./var, django-q2's ORM broker, a
channel layer that needs no server, the demo agent. Production: DATABASE_URL (PostgreSQL),
REDIS_URL (channel layer), SECRET_KEY, DEBUG=0, ALLOWED_HOSTS.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("JUNE_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_list(name: str, default: str) -> list[str]:
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")


def _embedded_secret_key() -> str:
    """The embedded default's key: random, made once, kept in var/secret_key (so every
    ``manage.py`` command of a checkout — dev.py run's processes, ``june token``, a shell —
    signs django-q2 tasks alike, and no two checkouts share a key)."""
    path = VAR_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key)
        return key
    except OSError:
        return ""


if not SECRET_KEY:
    if "pytest" in sys.modules:
        SECRET_KEY = "june-test-insecure-key-do-not-use-in-production"
    # the embedded default (SQLite under var/, no DATABASE_URL): `python manage.py …` works as
    # the docs write it; a deployment (DATABASE_URL) must set SECRET_KEY
    elif env_bool("JUNE_EMBEDDED", False) or DEBUG or not os.environ.get("DATABASE_URL"):
        SECRET_KEY = _embedded_secret_key()
    if not SECRET_KEY:
        raise ImproperlyConfigured("SECRET_KEY must be set (or run the embedded default: python dev.py run)")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# the site's own origin (scheme, host and port of the request) is trusted without being listed;
# list only OTHER origins allowed to post forms and open the websocket (none by default)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_q",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by whitenoise at /api/docs/
    "agents_app",
    "sessions_app",
]

# One synchronous stack (sessions_app/web/syncstack.py): Django's own middleware, declared
# sync-only, so a request hands off to its thread once, not at every middleware
MIDDLEWARE = [
    "sessions_app.web.syncstack.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "sessions_app.web.syncstack.SessionMiddleware",
    "sessions_app.web.syncstack.CommonMiddleware",
    "sessions_app.web.syncstack.CsrfViewMiddleware",
    "sessions_app.web.syncstack.AuthenticationMiddleware",
    # NUL or a lone surrogate in a form field or the query: 400 before any view (PostgreSQL cannot store them)
    "sessions_app.web.formtext.FormTextGuard",
    "sessions_app.web.syncstack.MessageMiddleware",
    "sessions_app.web.syncstack.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "june_project.urls"
WSGI_APPLICATION = "june_project.wsgi.application"
ASGI_APPLICATION = "june_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- database -------------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(VAR_DIR / "june.sqlite3")}}

_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # concurrent writers (daphne + q2 workers): WAL, immediate transactions, a busy timeout.
    # The page size takes only on a new file (before WAL): pages of 8 KB hold three messages of
    # 2,000 characters where pages of 4 KB hold one (bench/bench_engine.py's storage figures)
    _db.setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": f"PRAGMA page_size={int(os.environ.get('JUNE_SQLITE_PAGE_SIZE', '8192'))}; "
                            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    _db.setdefault("TEST", {})["NAME"] = str(VAR_DIR / "test_june.sqlite3")
elif _db["ENGINE"] in ("django.db.backends.postgresql",):
    # a bounded pool of connections per process (docs/workers.md "Connections"): by default in
    # the web process (daphne: a request's thread takes one, and a burst waits for one), not in
    # the worker cluster, whose processes fork (a pool does not survive a fork) and bound their
    # connections by their runner's threads. DATABASE_POOL=1 / 0 forces it on / off everywhere.
    _pool = os.environ.get("DATABASE_POOL", "").strip().lower()
    if _pool in ("1", "true", "yes", "on") or (_pool == "" and os.environ.get("JUNE_PROCESS") == "web"):
        _db["CONN_MAX_AGE"] = 0
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": int(os.environ.get("JUNE_DB_POOL_MIN", "2")),
            "max_size": int(os.environ.get("JUNE_DB_POOL_MAX", "20")),
            # a request waits this long for a connection, then gets a 503 with Retry-After
            "timeout": float(os.environ.get("JUNE_DB_POOL_TIMEOUT", "30")),
        }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- channels -------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # socket_timeout above channels_redis's 5 s blocking pop: redis-py 8 defaults to 5 s,
            # which turns every idle websocket's receive into a TimeoutError (a 1011 close)
            # prefix: the keys of one site (several sites, or test runs, may share one Redis)
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "capacity": 1000, "expiry": 30,
                       "prefix": os.environ.get("JUNE_CHANNEL_PREFIX", "asgi")},
        }
    }
else:
    # no server: daphne and the q2 workers talk over unix sockets in VAR_DIR (sessions_app.outbox.layers)
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "sessions_app.outbox.layers.UnixSocketChannelLayer",
            "CONFIG": {"path": str(VAR_DIR / "channels"), "capacity": 1000, "expiry": 30},
        }
    }

# -- django-q2 (docs/workers.md) ---------------------------------------------------------------
# ORM broker: at-least-once (a task whose worker died is taken again after ``retry``; the lease
# sweeper below re-enqueues the turn much sooner). timeout < retry so a running task is never
# handed out twice; max_attempts bounds a task that keeps failing; poll is how long an idle
# cluster sleeps between looks at the queue (a queued turn starts within ~poll).
_q_workers = int(os.environ.get("JUNE_Q_WORKERS", "2"))
Q_CLUSTER = {
    "name": os.environ.get("JUNE_Q_NAME", "june"),
    "orm": "default",
    "workers": _q_workers,
    "timeout": int(os.environ.get("JUNE_Q_TIMEOUT", "1800")),
    "retry": int(os.environ.get("JUNE_Q_RETRY", "1860")),
    "max_attempts": int(os.environ.get("JUNE_Q_MAX_ATTEMPTS", "3")),
    "ack_failures": True,
    "poll": float(os.environ.get("JUNE_Q_POLL", "0.05")),
    # a cluster holds at most this many fetched-but-unstarted tasks (locked for ``retry``)
    "queue_limit": int(os.environ.get("JUNE_Q_QUEUE_LIMIT", str(_q_workers))),
    "catch_up": False,
    "save_limit": 1000,
    # a worker process is retired after this many tasks (0: never). A retired worker takes no
    # more and exits once the turns its runner drives have ended (docs/workers.md)
    "recycle": int(os.environ.get("JUNE_Q_RECYCLE", "0")),
    "label": "Django Q2",
    "sync": env_bool("JUNE_Q_SYNC", False),
}
# the queue's broker: on PostgreSQL the ORM broker woken by LISTEN/NOTIFY (docs/workers.md)
_q_broker = os.environ.get("JUNE_Q_BROKER", "")
if not _q_broker and _db["ENGINE"] == "django.db.backends.postgresql":
    _q_broker = "sessions_app.workers.broker.NotifyingORM"
if _q_broker:
    Q_CLUSTER["broker_class"] = _q_broker
# django-q2's result row for each run_turn task (a write and a prune of the result table per task
# in the cluster's monitor); the turn's own row is its record, so it is not kept unless asked
JUNE_Q_SAVE_TURNS = env_bool("JUNE_Q_SAVE_TURNS", False)
if Q_CLUSTER["timeout"] >= Q_CLUSTER["retry"]:
    raise ImproperlyConfigured("JUNE_Q_TIMEOUT must be below JUNE_Q_RETRY (else a running task is handed out twice)")

# -- June -------------------------------------------------------------------------------------
JUNE_AGENT_DIRS = env_list("JUNE_AGENT_DIRS", "")
JUNE_LEASE_SECONDS = float(os.environ.get("JUNE_LEASE_SECONDS", "10"))
JUNE_MAX_ATTEMPTS = int(os.environ.get("JUNE_MAX_ATTEMPTS", "5"))
# subagents (docs/subagents.md): how deep a tree of turns may grow, how many children one tool call may spawn
JUNE_SUBAGENT_MAX_DEPTH = int(os.environ.get("JUNE_SUBAGENT_MAX_DEPTH", "3"))
JUNE_SUBAGENT_MAX_FANOUT = int(os.environ.get("JUNE_SUBAGENT_MAX_FANOUT", "8"))
# what one turn may spend, for agents that declare no ``limits`` (agents_app/runtime/limits.py):
# JSON, e.g. {"model_calls": 50, "tokens": 200000}; a turn at a limit answers without tools
JUNE_TURN_LIMITS = json.loads(os.environ.get("JUNE_TURN_LIMITS") or '{"model_calls": 50}')
# per-user rate limits and quotas (sessions_app/quotas.py), checked before a turn is created;
# 0 turns one off, JUNE_RATE_LIMITS=0 all of them (benches and load tests)
JUNE_RATE_LIMITS = env_bool("JUNE_RATE_LIMITS", True)
JUNE_RATE_TURNS_PER_MINUTE = int(os.environ.get("JUNE_RATE_TURNS_PER_MINUTE", "30"))
JUNE_QUOTA_TOKENS_PER_DAY = int(os.environ.get("JUNE_QUOTA_TOKENS_PER_DAY", "5000000"))
JUNE_QUOTA_AGENT_TOKENS_PER_DAY = int(os.environ.get("JUNE_QUOTA_AGENT_TOKENS_PER_DAY", "50000000"))
JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE = int(os.environ.get("JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE", "60"))
JUNE_RATE_SCHEDULE_TURNS_PER_HOUR = int(os.environ.get("JUNE_RATE_SCHEDULE_TURNS_PER_HOUR", "60"))
# how long a process reuses a user's or an agent's tokens of today (every turn of the day is summed)
JUNE_QUOTA_CACHE_SECONDS = float(os.environ.get("JUNE_QUOTA_CACHE_SECONDS", "10"))
# the lease watchdog in every worker process: seconds between sweeps of expired leases (0 = off)
JUNE_SWEEP_SECONDS = float(os.environ.get("JUNE_SWEEP_SECONDS", "1"))
# the scheduled sweeper (django-q2 schedule, created by migrate): minutes between runs
JUNE_SWEEP_MINUTES = int(os.environ.get("JUNE_SWEEP_MINUTES", "1"))
# a re-enqueued turn not claimed within this many seconds is re-enqueued again
JUNE_REDELIVER_AFTER = float(os.environ.get("JUNE_REDELIVER_AFTER", "30"))
# a queued turn, first of its chain, whose task a cluster took this many seconds ago without
# claiming the turn (or that has no task) is re-enqueued by the watchdog; at most once per this
# window. By default the lease: a taken task is a lease nobody renews (docs/workers.md)
JUNE_REQUEUE_AFTER = float(os.environ.get("JUNE_REQUEUE_AFTER") or JUNE_LEASE_SECONDS)
if JUNE_REQUEUE_AFTER <= 0:
    raise ImproperlyConfigured("JUNE_REQUEUE_AFTER must be positive (else every watchdog pass re-enqueues every taken task)")
JUNE_EMBEDDED = env_bool("JUNE_EMBEDDED", False)
# many turns per worker process (docs/workers.md): how many turns one worker process's runner
# drives at once, the threads its sync tools and Django-connection calls run on (each keeps a
# connection), and its own PostgreSQL connections for the units that run no tool code
JUNE_TURNS_PER_WORKER = int(os.environ.get("JUNE_TURNS_PER_WORKER", "200"))
JUNE_WORKER_THREADS = int(os.environ.get("JUNE_WORKER_THREADS", "8"))
JUNE_WORKER_DB_CONNECTIONS = int(os.environ.get("JUNE_WORKER_DB_CONNECTIONS", "2"))
if min(JUNE_TURNS_PER_WORKER, JUNE_WORKER_THREADS, JUNE_WORKER_DB_CONNECTIONS) < 1:
    raise ImproperlyConfigured("JUNE_TURNS_PER_WORKER, JUNE_WORKER_THREADS and JUNE_WORKER_DB_CONNECTIONS must be >= 1")
# checkpoints as prepared statements on PostgreSQL (turn off behind a transaction-mode pooler
# that cannot keep prepared statements)
JUNE_PREPARED_CHECKPOINTS = env_bool("JUNE_PREPARED_CHECKPOINTS", True)
JUNE_MAX_TEXT_CHARS = int(os.environ.get("JUNE_MAX_TEXT_CHARS", "32000"))
# the HTTP API and SSE (docs/api.md)
JUNE_API_WAIT_SECONDS = float(os.environ.get("JUNE_API_WAIT_SECONDS", "120"))
JUNE_API_STREAM_SECONDS = float(os.environ.get("JUNE_API_STREAM_SECONDS", "3600"))
JUNE_SSE_KEEPALIVE_SECONDS = float(os.environ.get("JUNE_SSE_KEEPALIVE_SECONDS", "15"))
#: how often a stream re-reads the log when the live channel is silent (default: 0.25 s on a
#: layer inside this process, else 2 s)
JUNE_SSE_POLL_SECONDS = float(os.environ["JUNE_SSE_POLL_SECONDS"]) if os.environ.get("JUNE_SSE_POLL_SECONDS") else None
# webhook deliveries (docs/proactive.md)
JUNE_WEBHOOK_RETRIES = int(os.environ.get("JUNE_WEBHOOK_RETRIES", "5"))
JUNE_WEBHOOK_BACKOFF = float(os.environ.get("JUNE_WEBHOOK_BACKOFF", "1.0"))
#: how long a schedule's firing worker waits for its turn to settle
JUNE_SCHEDULE_TURN_TIMEOUT = float(os.environ.get("JUNE_SCHEDULE_TURN_TIMEOUT", "900"))
# US dollars per million tokens by model id (or id prefix), merged over the defaults in
# sessions_app/admin/console.py (Anthropic list prices, zero for demo): e.g.
# JUNE_MODEL_PRICES='{"claude-sonnet-4": {"input": 3, "output": 15}}'
JUNE_MODEL_PRICES = json.loads(os.environ.get("JUNE_MODEL_PRICES") or "{}")

# health (docs/operations.md "Health"): the time /readyz's checks get, and how often each worker
# process writes its heartbeat (a worker not seen for 3 beats is shown as gone)
JUNE_HEALTH_TIMEOUT = float(os.environ.get("JUNE_HEALTH_TIMEOUT", "2"))
JUNE_WORKER_BEAT_SECONDS = float(os.environ.get("JUNE_WORKER_BEAT_SECONDS", "5"))
if JUNE_HEALTH_TIMEOUT <= 0 or JUNE_WORKER_BEAT_SECONDS <= 0:
    raise ImproperlyConfigured("JUNE_HEALTH_TIMEOUT and JUNE_WORKER_BEAT_SECONDS must be positive")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
DATA_UPLOAD_MAX_MEMORY_SIZE = 256 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"refusals_on_one_line": {"()": "sessions_app.logfilters.RefusalsOnOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    # a 403 / 404 / 400 is logged as one line (status, path), never with a traceback
    "loggers": {"django.request": {"filters": ["refusals_on_one_line"]},
                "django.security": {"filters": ["refusals_on_one_line"]}},
}
