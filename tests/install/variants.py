"""The matrix's host projects: startproject variants of docs/install.md, each a rewrite of the
page's text (``Host.rewrite``: every old text must be in the page) and files of the host's own
(``before_commands``), then the page's commands as written."""

from __future__ import annotations

import subprocess
import sys

from tests.install.host import Host
from tests.processes import free_port

#: a custom user: UUID primary key, the email as USERNAME_FIELD, no username at all
MEMBER = """import uuid

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models


class MemberManager(BaseUserManager):
    def create_user(self, email, password=None, **extra):
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email, password=None, **extra):
        return self.create_user(email, password, is_staff=True, is_superuser=True, **extra)


class Member(AbstractBaseUser, PermissionsMixin):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)

    USERNAME_FIELD = "email"
    objects = MemberManager()
"""

#: the host's own login page (``django.contrib.auth.urls``' template)
LOGIN = """<!doctype html><title>Shop login</title>
<form method="post">{% csrf_token %}{{ form.as_p }}<input type="hidden" name="next" value="{{ next }}">
<button type="submit">Sign in to the shop</button></form>
"""

WHITENOISE = 'MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")'


def uuid_email_user_own_static(database_url: str, tags: set[str]) -> tuple[Host, dict]:
    """A custom user (UUID key, email login) and no WhiteNoise: the host serves STATIC_ROOT from
    a static server of its own, on another origin (as a CDN)."""
    static_port = free_port()

    def accounts(host: Host) -> None:
        app = host.cwd / "accounts"
        (app / "migrations").mkdir(parents=True)
        for name in ("__init__.py", "migrations/__init__.py"):
            (app / name).write_text("")
        (app / "models.py").write_text(MEMBER)
        with open(host.cwd / "mysite" / "settings.py", "a") as settings:
            settings.write('\nINSTALLED_APPS += ["accounts"]\nAUTH_USER_MODEL = "accounts.Member"\n')
        host.manage("makemigrations", "accounts")

    host = Host(
        tags=tags | {"api"},
        database_url=database_url,
        rewrite={
            WHITENOISE: f'STATIC_URL = "http://127.0.0.1:{static_port}/"',
            "june token alice": "june token alice@example.com",
        },
        before_commands=accounts,
    )
    return host, {"static_port": static_port, "login": "alice@example.com", "operator": "olga@example.com"}


#: a static server that answers cross-origin requests, as a CDN for June must (the chat's scripts
#: are ES modules, which browsers fetch with CORS: docs/install.md "Static files")
STATIC_SERVER = """
import functools, http.server, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), functools.partial(Handler, directory=sys.argv[1])).serve_forever()
"""


def serve_static(host: Host, port: int) -> subprocess.Popen:
    """The host's own static server: STATIC_ROOT, on its own port (another origin)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STATIC_SERVER, str(host.cwd / "staticfiles"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    host.procs.append(proc)
    return proc


#: a schedule of the host's agent (docs/proactive.md): its runs open turns in alice's session
SCHEDULE = """

schedules = [
    {"name": "stocktake", "cron": "0 6 * * *", "seed": "order 1 ledger", "session": "stocktake", "owner": "alice"}
]
"""


def own_auth_at_root(database_url: str, tags: set[str]) -> tuple[Host, dict]:
    """Its own auth URLs (``django.contrib.auth.urls``, its template) and LOGIN_URL, June at "";
    its agent declares a schedule, which an operator runs from the admin."""

    def login_template(host: Host) -> None:
        folder = host.cwd / "shop" / "templates" / "registration"
        folder.mkdir(parents=True)
        (folder / "login.html").write_text(LOGIN)
        with open(host.cwd / "shop" / "agents" / "clerk" / "agent.py", "a") as agent:
            agent.write(SCHEDULE)

    host = Host(
        tags=tags | {"api"},
        database_url=database_url,
        rewrite={
            'LOGIN_URL = "sessions_app:login"': 'LOGIN_URL = "/accounts/login/"',
            'path("assistant/", include("june.urls")),': 'path("accounts/", include("django.contrib.auth.urls")),\n'
            '    path("", include("june.urls")),',
            'websocket_application(prefix="assistant/")': 'websocket_application(prefix="")',
            "127.0.0.1:8000/assistant/api/": "127.0.0.1:8000/api/",
        },
        before_commands=login_template,
    )
    return host, {}
