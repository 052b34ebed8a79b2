"""``/healthz`` and ``/readyz`` (docs/operations.md "Health"): JSON for a load balancer or an
orchestrator, unauthenticated, GET and HEAD only.

``/healthz``: the process is up and answers (no database, no other server): ``{"status": "ok"}``.
``/readyz``: ``sessions_app.health.readiness``'s report, 200 when every check is ok, else 503 with
``Retry-After``. Neither ever answers a 500 or an HTML page: any exception is a failed check (a
503), and the site's 400/404/500 handlers answer these paths in JSON too.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from sessions_app import health
from sessions_app.web.bodylimit import max_body

log = logging.getLogger(__name__)

PATHS = ("/healthz", "/readyz")
METHODS = ("GET", "HEAD")
#: seconds a load balancer is told to wait before it asks a site that is not ready again
RETRY_AFTER = "5"


def is_probe(path: str) -> bool:
    """A path of these endpoints (with or without a trailing slash)."""
    return path.rstrip("/") in PATHS


def _refuse(request: HttpRequest) -> JsonResponse | None:
    if request.method in METHODS:
        return None
    response = JsonResponse({"error": {"code": "method_not_allowed", "message": "GET or HEAD only"}}, status=405)
    response["Allow"] = ", ".join(METHODS)
    return response


def _json(body: dict[str, Any], status: int = 200) -> JsonResponse:
    response = JsonResponse(body, status=status)
    if status == 503:
        response["Retry-After"] = RETRY_AFTER
    return response


@csrf_exempt
@never_cache
@max_body(0)
def healthz(request: HttpRequest) -> HttpResponse:
    return _refuse(request) or _json({"status": health.OK})


@csrf_exempt
@never_cache
@max_body(0)
async def readyz(request: HttpRequest) -> HttpResponse:
    if (refused := _refuse(request)) is not None:
        return refused
    try:
        report = await health.readiness()
    except Exception:  # readiness catches its checks' failures; this is the net under it
        log.exception("readiness failed")
        report = {"status": health.FAILED, "checks": dict.fromkeys(health.CHECKS, health.FAILED)}
    return _json(report, 200 if report["status"] == health.OK else 503)
