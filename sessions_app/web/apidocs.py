"""``/api/docs/``: the OpenAPI document rendered for people (Swagger UI, served from static
files — drf-spectacular-sidecar's copy, collected and served by whitenoise; no CDN)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_safe


@require_safe
@ensure_csrf_cookie  # "Try it out" with the site's login sends the cookie's token on POSTs
def api_docs(request: HttpRequest) -> HttpResponse:
    return render(request, "sessions_app/api_docs.html")
