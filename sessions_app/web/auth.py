"""Who is calling the HTTP API.

Two ways in: ``Authorization: Bearer <token>`` (a per-user ApiToken, looked up by its hash;
CSRF-exempt, because a header is never sent ambiently by a browser), or the Django session
cookie (the chat UI's JavaScript), for which unsafe methods must pass Django's CSRF check like
any form post. A present but wrong ``Authorization`` header never falls back to the cookie.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone

from sessions_app.models import ApiToken
from sessions_app.site_errors import AccessDenied, Unauthenticated

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: last_used_at is refreshed at most this often: not one write per request
LAST_USED_GRANULARITY = timedelta(seconds=60)
MAX_TOKEN_CHARS = 200


class CsrfFailed(AccessDenied):
    code = "csrf_failed"


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, returning the failure reason instead of an HTML page."""

    def _reject(self, request: Any, reason: str) -> str:  # type: ignore[override]
        return reason


def user_for_token(raw: str) -> Any:
    """The active user owning the token; Unauthenticated otherwise."""
    if not raw or len(raw) > MAX_TOKEN_CHARS:
        raise Unauthenticated("invalid API token")
    # key_hash is unique: a plain LIMIT 1, not first()'s ORDER BY, which the ORM compiles again
    # on every API request
    row = next(iter(ApiToken.objects.select_related("user").filter(key_hash=ApiToken.hash(raw))[:1]), None)
    if row is None or not row.user.is_active:
        raise Unauthenticated("invalid API token")
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_GRANULARITY:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row.user


def check_csrf(request: Any) -> None:
    check = _CsrfCheck(lambda _request: None)
    check.process_request(request)
    reason = check.process_view(request, None, (), {})
    if reason:
        raise CsrfFailed(f"CSRF check failed: {reason}")


def authenticate(request: Any) -> Any:
    """The calling user (sync: it reads the database). Sets ``request.june_auth`` to
    ``"bearer"`` or ``"session"``. Raises Unauthenticated (401) or CsrfFailed (403)."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if header:
        scheme, _, raw = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
        user = user_for_token(raw.strip())
        request.june_auth = "bearer"
        return user
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise Unauthenticated("log in, or send 'Authorization: Bearer <token>'")
    if not user.is_active:
        raise Unauthenticated("this account is inactive")
    if request.method not in SAFE_METHODS:
        check_csrf(request)
    request.june_auth = "session"
    return user
