"""A ``Host`` not in ``ALLOWED_HOSTS`` under the API (or a health probe) is a JSON 400, with
``DEBUG`` on too. Django answers the ``DisallowedHost`` with ``handler400`` (JSON there:
``api.handler400``) only when ``DEBUG`` is off; with it on, it showed its HTML debug page to an
API client. This middleware, outermost, checks the host first for those paths."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

from sessions_app.web.api import error_response, json_path


class ApiHostGuard:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if json_path(request.path):
            try:
                request.get_host()
            except DisallowedHost:
                return error_response(400, "bad_request", "this Host is not one the site serves (ALLOWED_HOSTS)")
        return self.get_response(request)
