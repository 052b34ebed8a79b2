"""Django's middleware, run as one synchronous stack: one thread hop per request, not two a middleware.

Under ASGI, Django runs a ``MiddlewareMixin`` middleware's ``process_request`` and
``process_response`` each through ``sync_to_async`` (a hand-off to the request's thread and
back), and WhiteNoise, sync-only, makes the stack below it hop back to the event loop with
``async_to_sync``. With the middlewares of this site that was over a dozen hand-offs per
request, and under a burst of ``POST …/turns`` (``bench/bench_concurrency.py``) a profile of
daphne showed them as most of its CPU. Declared sync-only here, the whole stack runs in the
request's thread in one go; an async view is entered once, at the bottom."""

from __future__ import annotations

from django.contrib.auth import middleware as auth
from django.contrib.messages import middleware as messages
from django.contrib.sessions import middleware as sessions
from django.middleware import clickjacking, common, csrf, security


def _sync_only(middleware: type) -> type:
    """``middleware`` declared sync-only (its name kept, for settings and error messages)."""
    return type(middleware.__name__, (middleware,), {"async_capable": False, "__module__": __name__})


SecurityMiddleware = _sync_only(security.SecurityMiddleware)
SessionMiddleware = _sync_only(sessions.SessionMiddleware)
CommonMiddleware = _sync_only(common.CommonMiddleware)
CsrfViewMiddleware = _sync_only(csrf.CsrfViewMiddleware)
AuthenticationMiddleware = _sync_only(auth.AuthenticationMiddleware)
MessageMiddleware = _sync_only(messages.MessageMiddleware)
XFrameOptionsMiddleware = _sync_only(clickjacking.XFrameOptionsMiddleware)
