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
from django.http import HttpRequest
from django.middleware import clickjacking, common, csrf, security

from sessions_app.web.bodylimit import has_route


def _sync_only(middleware: type) -> type:
    """``middleware`` declared sync-only (its name kept, for settings and error messages)."""
    return type(middleware.__name__, (middleware,), {"async_capable": False, "__module__": __name__})


SecurityMiddleware = _sync_only(security.SecurityMiddleware)
SessionMiddleware = _sync_only(sessions.SessionMiddleware)


class CommonMiddleware(common.CommonMiddleware):
    """Django's, sync-only, and without resolving a path the body limit has just resolved.

    With ``APPEND_SLASH`` Django resolves the path of every request whose path does not end in
    a slash (``should_redirect_with_slash``: a path with a route is never redirected), and the
    handler then resolves it again for the view. Under daphne the body limit resolved it already,
    at the request's headers (``bodylimit.has_route``): a path it found a route for is not
    resolved again here. Any other path is Django's to check, as before."""

    async_capable = False

    def should_redirect_with_slash(self, request: HttpRequest) -> bool:
        if getattr(request, "urlconf", None) is None and has_route(request.path_info):
            return False
        return bool(super().should_redirect_with_slash(request))


CsrfViewMiddleware = _sync_only(csrf.CsrfViewMiddleware)
AuthenticationMiddleware = _sync_only(auth.AuthenticationMiddleware)
MessageMiddleware = _sync_only(messages.MessageMiddleware)
XFrameOptionsMiddleware = _sync_only(clickjacking.XFrameOptionsMiddleware)
