"""Errors of the site, each mapped once to an HTTP status and a code.

The engine's JuneErrors carry their own ``http_status``/``code``; these add what only the
transports know (access, validation, size)."""

from __future__ import annotations

from agents_app.runtime.errors import JuneError, TurnConflictError


class AccessDenied(JuneError):
    http_status = 403
    code = "forbidden"


class NotSessionOwner(AccessDenied):
    """A user's start met a session that user does not own (another's, or one with no owner):
    the store created nothing. ``access.refused_start`` says which refusal it is."""


class Unauthenticated(JuneError):
    http_status = 401
    code = "unauthenticated"


class BadRequest(JuneError):
    http_status = 400
    code = "bad_request"


class PayloadTooLarge(JuneError):
    http_status = 413
    code = "payload_too_large"


class UnsupportedMediaType(JuneError):
    http_status = 415
    code = "unsupported_media_type"


class Unprocessable(JuneError):
    http_status = 422
    code = "unprocessable"


class UserBusy(TurnConflictError):
    """A user's data cannot be erased now: one of their turns is unfinished (409)."""

    code = "user_busy"


def error_body(exc: JuneError) -> dict:
    body = {"code": exc.code, "message": str(exc) or exc.code}
    if isinstance(exc, RateLimited):
        body.update(retry_after=exc.retry_after, limit=exc.limit)
    return {"error": body}


class RateLimited(JuneError):
    """A limit or quota of ``sessions_app.quotas`` refused a new turn; nothing was created.
    ``retry_after``: whole seconds until the window that refused it ends."""

    http_status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, limit: str) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))
        self.limit = limit
