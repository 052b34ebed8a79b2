"""Settings, entirely from the environment (12-factor).

Embedded default (no variables set): SQLite in WAL mode under ./var, django-q2's ORM broker, a
channel layer that needs no server, the demo agent. Production: DATABASE_URL (PostgreSQL),
REDIS_URL (channel layer), SECRET_KEY, DEBUG=0, ALLOWED_HOSTS.
"""

from __future__ import annotations

import os
import secrets
import sys
from importlib.util import find_spec
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from june import settings as june

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("JUNE_VAR_DIR", BASE_DIR / "var"))
JUNE_VAR_DIR = str(VAR_DIR)


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
    "june_evals.evalapp.EvalsConfig",  # evals: datasets, runs, the admin's side by side (docs/evals.md)
]
# daphne's app only makes ``runserver`` daphne's; importing it loads Twisted, Autobahn and
# cryptography into every process, the workers' too, which never serve HTTP. The
# web process is ``daphne june_project.asgi:application`` (Procfile, dev.py run) and needs no app
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

# One synchronous stack (sessions_app/web/syncstack.py): Django's own middleware, declared
# sync-only, so a request hands off to its thread once, not at every middleware
MIDDLEWARE = [
    # a Host not in ALLOWED_HOSTS under /api/ or a probe: JSON 400, with DEBUG on too
    "sessions_app.web.hostguard.ApiHostGuard",
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

# a front end served from another origin (docs/frontends.md): the origins allowed to call the API
# across origins, by django-cors-headers (the ``cors`` extra); none by default, and then the
# library is not even loaded. Cross-origin callers should send bearer tokens: a cookie would
# also need SameSite=None and CSRF_TRUSTED_ORIGINS.
CORS_ALLOWED_ORIGINS = env_list("JUNE_CORS_ALLOWED_ORIGINS", "")
if CORS_ALLOWED_ORIGINS:
    if find_spec("corsheaders") is None:
        raise ImproperlyConfigured(
            "JUNE_CORS_ALLOWED_ORIGINS needs django-cors-headers: pip install 'june-django[cors]'"
        )
    INSTALLED_APPS.append("corsheaders")
    MIDDLEWARE.insert(1, "corsheaders.middleware.CorsMiddleware")  # before CommonMiddleware: preflights too
    CORS_URLS_REGEX = r"^/api/"
    # what a front end's fetch may read: the UI message stream's header, June's turn id and its links
    CORS_EXPOSE_HEADERS = ["x-vercel-ai-ui-message-stream", "x-june-turn-id", "location", "retry-after"]

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

# -- channels, django-q2 and June's own settings: the helpers a host project uses too ----------
# (june/settings.py; docs/workers.md for the queue, docs/install.md for a host project)
CHANNEL_LAYERS = june.channel_layers(var_dir=VAR_DIR)
Q_CLUSTER = june.q_cluster(database_engine=_db["ENGINE"])
globals().update(june.june_settings())
# this repository's site is the demo: its agents (ops, researcher) are on unless turned off
JUNE_DEMO_AGENTS = env_bool("JUNE_DEMO_AGENTS", True)

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
# June's static files live in its apps (sessions_app/static/june/), found by the app finder
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
# uploads (attachments): local files under var/media unless STORAGES["default"] names a
# django-storages backend (README "Attachments"); never served directly (an owner-checked view)
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT", VAR_DIR / "media"))
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
    "loggers": {
        "django.request": {"filters": ["refusals_on_one_line"]},
        "django.security": {"filters": ["refusals_on_one_line"]},
    },
}
