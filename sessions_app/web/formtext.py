"""Text from forms and query strings, checked once where it enters: no NUL, no lone surrogate.

The JSON transports refuse such strings when they parse (``sessions_app.safejson``); a form
(the chat's rename, the admin's forms, an answer typed in the inbox) and a query string
(the admin's search) reach the database through Django's own parsing, where PostgreSQL then
refused the text with a ``DataError`` — a 500. This middleware gives every such request the
same 400 as the JSON transports (JSON under /api/, a plain page elsewhere), before any view
runs, so nothing is written."""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest

from sessions_app.safejson import BAD_STRING, has_forbidden
from sessions_app.web import links
from sessions_app.web.api import error_response

FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _bad(pairs: Any) -> bool:
    for key, values in pairs:
        if has_forbidden(key) or any(isinstance(v, str) and has_forbidden(v) for v in values):
            return True
    return False


def refusal(request: HttpRequest) -> HttpResponse | None:
    """The 400 for a request whose query or form fields hold text the database cannot store."""
    bad = _bad(request.GET.lists())
    if not bad and request.method in ("POST", "PUT", "PATCH") and request.content_type in FORMS:
        try:
            request.body  # noqa: B018 (read now, kept: a view that reads the body after the form's parse still can)
            bad = _bad(request.POST.lists())
        except Exception:  # a body Django cannot parse: its own handling answers (400)
            return None
    if not bad:
        return None
    if links.is_api_path(request.path):
        return error_response(400, "bad_request", BAD_STRING)
    return HttpResponseBadRequest(f"Bad request: {BAD_STRING}.", content_type="text/plain; charset=utf-8")


class FormTextGuard:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return refusal(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return refusal(request) or await self.get_response(request)
