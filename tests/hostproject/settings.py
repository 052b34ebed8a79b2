"""A host project, not June's own site: a custom user model, a base template of its own, its own
app (``shop``) holding an agent and a model that agent's tool writes, June mounted under
``/assistant/``. Only what a team adds for June is June's (docs/install.md): the apps, the
middleware it already had, ``june.q_cluster()`` / ``june.channel_layers()``, the URL include
and the ASGI helper. No ``JUNE_*`` setting: every one has its default."""

import os
from pathlib import Path

import dj_database_url

from june import settings as june

HERE = Path(__file__).resolve().parent
VAR = Path(os.environ.get("HOST_VAR_DIR", HERE / "var"))
VAR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("SECRET_KEY", "host-project-test-key-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "hostproject.accounts",
    "hostproject.shop",
    # June
    "channels",
    "django_q",
    "agents_app",
    "sessions_app",
    "june_evals.evalapp.EvalsConfig",  # evals (docs/evals.md): cases made of its members' sessions
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "hostproject.urls"
ASGI_APPLICATION = "hostproject.asgi.application"
AUTH_USER_MODEL = "accounts.Member"
LOGIN_URL = "/staff/login/"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR / "host.sqlite3"),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

Q_CLUSTER = june.q_cluster(database_engine=DATABASES["default"]["ENGINE"], workers=1)
CHANNEL_LAYERS = june.channel_layers(var_dir=VAR)

STATIC_URL = "/static/"
STATIC_ROOT = VAR / "static"
USE_TZ = True
TIME_ZONE = "UTC"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
