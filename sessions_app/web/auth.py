"""Who is calling the HTTP API.

Two ways in: ``Authorization: Bearer <token>`` (a per-user ApiToken, looked up by its hash;
CSRF-exempt, because a header is never sent ambiently by a browser), or the Django session
cookie (the chat UI's JavaScript), for which unsafe methods must pass Django's CSRF check like
any form post. A present but wrong ``Authorization`` header never falls back to the cookie.
"""

from __future__ import annotations

import copy
import threading
import time
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models.signals import post_delete, post_save
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


class Known(NamedTuple):
    """A token read from the database: its row's key, its active user, its last use, and until
    when (``clock``) this process takes it without reading it again."""

    pk: int
    user: Any
    last_used_at: datetime | None
    good_until: float


#: token hash -> Known: a bearer client's requests read their token (and its user) once per
#: ``JUNE_TOKEN_CACHE_SECONDS`` per process, not once each. A token deleted, or its user
#: deactivated or deleted, is refused within that time by every process, at once by the one
#: that made the change (``_forget``)
_known: dict[str, Known] = {}
CACHE_ENTRIES = 10_000
clock = time.monotonic


def user_for_token(raw: str) -> Any:
    """The active user owning the token (a copy of the process's: a request's changes to it
    stay its own); Unauthenticated otherwise."""
    if not raw or len(raw) > MAX_TOKEN_CHARS:
        raise Unauthenticated("invalid API token")
    key_hash = ApiToken.hash(raw)
    known = _known.get(key_hash)
    now = timezone.now()
    if known is None or known.good_until <= clock() or _unrecorded(known, now):
        if settings.JUNE_TOKEN_CACHE_SECONDS > 0:
            with _reading(key_hash):  # the token's other requests meanwhile take this one's read
                known = _refreshed(key_hash, now)
        else:
            known = _refreshed(key_hash, now)
    return copy.copy(known.user)


def _unrecorded(known: Known, now: datetime) -> bool:
    return known.last_used_at is None or now - known.last_used_at >= LAST_USED_GRANULARITY


def _refreshed(key_hash: str, now: datetime) -> Known:
    """The token as ``_known`` holds it, read first when missing or past its time, and its use
    recorded when its last one is older than the granularity."""
    known = _known.get(key_hash)
    if known is None or known.good_until <= clock():
        known = _read(key_hash)
    if _unrecorded(known, now):
        ApiToken.objects.filter(pk=known.pk).update(last_used_at=now)
        if _known.get(key_hash) is known:
            known = _known[key_hash] = known._replace(last_used_at=now)
    return known


#: token hash -> the lock its reads take: the requests of a burst that find their token missing
#: or past its time at once (a burst's first, or the first after the window) make one read and
#: one record of its use between them, not one each; other tokens' reads do not wait for it
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def _reading(key_hash: str) -> threading.Lock:
    with _locks_lock:
        lock = _locks.get(key_hash)
        if lock is None:
            if len(_locks) >= CACHE_ENTRIES:
                _locks.clear()
            lock = _locks[key_hash] = threading.Lock()
        return lock


def _read(key_hash: str) -> Known:
    # key_hash is unique: a plain LIMIT 1, not first()'s ORDER BY, which the ORM compiles again
    row = next(iter(ApiToken.objects.select_related("user").filter(key_hash=key_hash)[:1]), None)
    if row is None or not row.user.is_active:
        _known.pop(key_hash, None)
        raise Unauthenticated("invalid API token")
    known = Known(row.pk, row.user, row.last_used_at, clock() + float(settings.JUNE_TOKEN_CACHE_SECONDS))
    if settings.JUNE_TOKEN_CACHE_SECONDS > 0:
        if len(_known) >= CACHE_ENTRIES:
            _known.clear()
        _known[key_hash] = known
    return known


def _forget(**_: Any) -> None:
    """A token deleted, a user saved (deactivated) or deleted in this process: its requests read
    their tokens again."""
    _known.clear()


post_delete.connect(_forget, sender=ApiToken, dispatch_uid="june-token-deleted")
post_save.connect(_forget, sender=settings.AUTH_USER_MODEL, dispatch_uid="june-user-saved")
post_delete.connect(_forget, sender=settings.AUTH_USER_MODEL, dispatch_uid="june-user-deleted")


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
