"""``POST /api/agents/<agent>/webhook``: an inbound turn from another system.

Body ``{"session": …, "text": …, "user": …}``. Attested only with ``X-June-Signature:
sha256=<hex>`` = HMAC-SHA256(``JUNE_WEBHOOK_SECRET_<AGENT>``, ``<X-June-Timestamp>.<raw body>``)
within 5 minutes; a bad, stale or replayed signature is refused (401 / 409); an unsigned request
runs unattested or is refused (401) per the agent's ``settings["webhook"]["unsigned"]``.
No cookie auth, so no CSRF: the signature (or the agent's explicit opt-in to unsigned turns) is
the authentication. Errors are JSON ``{"error": {"code", "message"}}``. Over the agent's webhook
rate (``JUNE_RATE_WEBHOOK_TURNS_PER_MINUTE``) or its token quota of the day: 429 with
``Retry-After``, nothing created (a signed request may be sent again then: it was not recorded as
seen).
"""

from __future__ import annotations

import time

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents_app.runtime.errors import JuneError
from sessions_app import safejson, wiring
from sessions_app.proactive import channels
from sessions_app.site_errors import BadRequest, PayloadTooLarge, RateLimited, Unauthenticated, error_body

MAX_BODY = 64 * 1024


class MethodNotAllowed(JuneError):
    http_status = 405
    code = "method_not_allowed"


def _body(request: HttpRequest) -> bytes:
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise BadRequest("invalid Content-Length") from None
    if declared > MAX_BODY:
        raise PayloadTooLarge(f"the body is larger than {MAX_BODY} bytes")
    try:
        body = request.body
    except RequestDataTooBig:
        raise PayloadTooLarge(f"the body is larger than {MAX_BODY} bytes") from None
    if len(body) > MAX_BODY:
        raise PayloadTooLarge(f"the body is larger than {MAX_BODY} bytes")
    return body


@csrf_exempt
def agent_webhook(request: HttpRequest, agent: str) -> JsonResponse:
    try:
        if request.method != "POST":
            raise MethodNotAllowed("use POST")
        wiring.agent(agent, versions=False)  # 404 for an unknown agent (an eval's version too)
        body = _body(request)
        verdict = channels.verify_signature(
            agent=agent,
            signature=request.headers.get("X-June-Signature"),
            timestamp=request.headers.get("X-June-Timestamp"),
            body=body,
            now=time.time(),
        )
        if verdict.signature is None and channels.webhook_settings(agent)["unsigned"] == "refuse":
            raise Unauthenticated("this agent accepts signed webhooks only (X-June-Signature)")
        if not (request.content_type or "").startswith("application/json"):
            raise BadRequest("Content-Type must be application/json")
        data = safejson.loads(body)
        out = channels.webhook_receive(agent=agent, data=data, verdict=verdict)
    except JuneError as exc:
        response = JsonResponse(error_body(exc), status=exc.http_status)
        if exc.http_status == 405:
            response["Allow"] = "POST"
        if isinstance(exc, RateLimited):
            response["Retry-After"] = str(exc.retry_after)
        return response
    return JsonResponse(out, status=202)


#: the largest body the server lets through to this view: a larger one is refused (413) before it
#: is read (the attribute ``sessions_app.web.bodylimit`` reads)
agent_webhook.june_max_body = MAX_BODY  # type: ignore[attr-defined]
