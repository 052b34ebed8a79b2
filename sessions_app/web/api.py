"""The HTTP API under ``/api/agents/<agent>/sessions/<session>/`` (routes: ``api_urls``; the
contract: ``openapi``; the guide: docs/api.md).

Thin entry points: authenticate, parse, call a service, render. Every error is JSON
``{"error": {"code", "message"}}`` with the status its JuneError class carries; an unexpected
exception is logged and answered with a bare 500 (never a stack). Long operations (waiting for
a turn, SSE) are async views so they hold no thread; the rest are sync views.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from typing import Any, Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from agents_app.runtime import rules
from agents_app.runtime.errors import JuneError, NotFound
from agents_app.runtime.seams import SETTLED_STATUSES, SessionRef, TurnStatus
from sessions_app import models as m
from sessions_app import selectors, services
from sessions_app.site_errors import BadRequest, PayloadTooLarge, RateLimited, error_body
from sessions_app.web import links
from sessions_app.web.auth import authenticate
from sessions_app.web.db import db
from sessions_app.web.inputs import read_body, read_headers, read_query
from sessions_app.web.openapi import document
from sessions_app.web.probes import is_probe
from sessions_app.web.shapes_common import Turn
from sessions_app.web.shapes_turns import Answer, EventsHeaders, EventsQuery, Nothing
from sessions_app.web.sse import SessionFollower, event_stream, parse_seq

log = logging.getLogger(__name__)

TURN_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
ENDED = SETTLED_STATUSES
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# -- responses and errors -------------------------------------------------------------------------------


def error_response(status: int, code: str, message: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def json_error(exc: JuneError) -> JsonResponse:
    response = JsonResponse(error_body(exc), status=exc.http_status)
    if exc.http_status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="june"'
    if isinstance(exc, RateLimited):
        response["Retry-After"] = str(exc.retry_after)
    return response


def unexpected(request: HttpRequest, exc: Exception) -> JsonResponse:
    """An exception no JuneError describes. A request Django itself could not read (a form body
    over the size limit, too many fields, a broken multipart body: met by the CSRF check of
    cookie callers) is the client's error; the database out of reach (down, restarting) is a
    503 ``unavailable`` to retry; anything else is logged and a bare 500."""
    if isinstance(exc, RequestDataTooBig):
        return json_error(PayloadTooLarge(f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"))
    if isinstance(exc, (SuspiciousOperation, MultiPartParserError)):
        return json_error(BadRequest("the request body cannot be read"))
    if isinstance(exc, (OperationalError, InterfaceError)):
        log.warning("API %s %s: database unavailable (%s)", request.method, request.path, exc)
        return error_response(503, "unavailable", "the database is unavailable; retry shortly", Retry_After="2")
    log.exception("API %s %s failed", request.method, request.path, exc_info=exc)
    return error_response(500, "internal_error", "internal error")


def api_view(*methods: str, auth: bool = True) -> Callable:
    """Method check (405 with ``Allow``), authentication (the user is passed as the second
    argument), JSON errors. Works for sync and async handlers; CSRF is checked by ``auth``
    (cookie callers only), so the middleware's HTML rejection is bypassed."""

    def decorate(fn: Callable) -> Callable:
        def refuse(request: HttpRequest) -> HttpResponse | None:
            if request.method in methods:
                return None
            return error_response(
                405, "method_not_allowed", f"{request.method} is not allowed here", Allow=", ".join(methods)
            )

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
                if (refused := refuse(request)) is not None:
                    return refused
                try:
                    user = await db(authenticate)(request) if auth else None
                    return await fn(request, user, **kwargs)
                except JuneError as exc:
                    return json_error(exc)
                except Exception as exc:
                    return unexpected(request, exc)
        else:

            @functools.wraps(fn)
            def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
                if (refused := refuse(request)) is not None:
                    return refused
                try:
                    user = authenticate(request) if auth else None
                    return fn(request, user, **kwargs)
                except JuneError as exc:
                    return json_error(exc)
                except Exception as exc:
                    return unexpected(request, exc)

        view.csrf_exempt = True  # type: ignore[attr-defined]
        return view

    return decorate


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Every path under the API no route takes, any method (june/urls.py routes them
    here, so neither DEBUG's page, nor the CSRF page, nor an APPEND_SLASH redirect is HTML)."""
    return error_response(404, "not_found", f"no API route {request.path[:300]}")


def extra_missing(extra: str, package: str) -> Callable:
    """A view for a route whose optional dependency is not installed: 501, naming the extra."""

    @csrf_exempt
    def view(request: HttpRequest, **kwargs: Any) -> JsonResponse:
        message = f"this endpoint needs the {package} package: pip install 'june-django[{extra}]'"
        return error_response(501, "not_installed", message)

    return view


def json_path(path: str) -> bool:
    """The paths whose errors are JSON: the API's and the health probes'."""
    return links.is_api_path(path) or is_probe(path)


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The site's 404 handler: JSON under the API, Django's page elsewhere."""
    if links.is_api_path(request.path):
        return not_found(request)
    return defaults.page_not_found(request, exception)


def handler400(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A request Django refused before any view (e.g. a Host not in ALLOWED_HOSTS)."""
    if json_path(request.path):
        return error_response(400, "bad_request", "bad request")
    return defaults.bad_request(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if json_path(request.path):
        return error_response(500, "internal_error", "internal error")
    return defaults.server_error(request)


# -- parsing (the bodies, queries and headers: ``inputs``, through the shapes) ---------------------------


def wants_stream(request: HttpRequest) -> bool:
    return "text/event-stream" in request.META.get("HTTP_ACCEPT", "")


# -- selectors --------------------------------------------------------------------------------------


def session_of(*, agent: str, key: str, user: Any) -> m.Session:
    session = services.session_for_user(agent=agent, key=key, user=user)
    if session is None:
        raise NotFound(f"no session {key!r} of agent {agent!r}")
    return session


def turn_of(*, agent: str, key: str, turn_id: str, user: Any) -> m.Turn:
    session = session_of(agent=agent, key=key, user=user)
    turn = selectors.turn_in_session(session, turn_id) if TURN_ID_RE.fullmatch(turn_id) else None
    if turn is None:
        raise NotFound(f"no turn {turn_id} in this session")
    return turn


def turn_json(turn: m.Turn) -> Turn:
    owed = rules.pending_requests(turn.pending) if turn.status == TurnStatus.SUSPENDED else []
    return {
        "turn_id": turn.pk,
        "agent": turn.session.agent,
        "session": turn.session.key,
        "status": turn.status,
        "text": turn.text or "",
        "error": turn.error,
        "pending": owed[0] if owed else None,
        "pending_requests": owed,  # all of them: a step's parallel calls that each need approval
        "cancel_reason": turn.cancel_reason,
        "usage": turn.usage or {},
        "generation": turn.generation,
        "created_at": turn.created_at.isoformat(),
        # when a worker first claimed it, and when it ended for good (null until then)
        "started_at": _iso(turn.started_at),
        "ended_at": _iso(turn.ended_at),
    }


def _iso(at: Any) -> str | None:
    return None if at is None else at.isoformat()


def turn_response(turn: m.Turn, request: HttpRequest, *, agent: str, key: str) -> JsonResponse:
    """200 once the turn has ended (or parked), else 202 with where to look it up."""
    ended = turn.status in ENDED
    response = JsonResponse(turn_json(turn), status=200 if ended else 202)
    if not ended:
        response["Location"] = links.turn_api(agent, key, turn.pk)
    return response


def load_turn(turn_id: str) -> m.Turn:
    turn = selectors.turn_with_session(turn_id)
    if turn is None:
        raise NotFound(f"no turn {turn_id}")
    return turn


# -- turns (starting one: api_turns) ---------------------------------------------------------------


@api_view("GET")
def turn_detail(request: HttpRequest, user: Any, agent: str, session: str, turn_id: str) -> HttpResponse:
    return JsonResponse(turn_json(turn_of(agent=agent, key=session, turn_id=turn_id, user=user)))


@api_view("POST")
def turn_resume(request: HttpRequest, user: Any, agent: str, session: str, turn_id: str) -> HttpResponse:
    """Answer the turn's parked request; the turn queues again (403/409/422 leave it parked)."""
    body = read_body(request, Answer)
    turn_of(agent=agent, key=session, turn_id=turn_id, user=user)
    services.turn_resume(
        turn_id=turn_id,
        input_id=body.input_id,
        answer=body.answer,
        user=user,
        agent=agent,
        key=session,
        via="api",
        remote_addr=request.META.get("REMOTE_ADDR", ""),
    )
    return turn_response(load_turn(turn_id), request, agent=agent, key=session)


@api_view("POST")
def turn_cancel(request: HttpRequest, user: Any, agent: str, session: str, turn_id: str) -> HttpResponse:
    """Cancel a queued turn now, a running one at its next checkpoint (202 until it stops)."""
    read_body(request, Nothing)
    turn_of(agent=agent, key=session, turn_id=turn_id, user=user)
    services.turn_cancel(turn_id=turn_id, agent=agent, key=session, user=user)  # rules.check_cancellable
    return turn_response(load_turn(turn_id), request, agent=agent, key=session)


# -- the session --------------------------------------------------------------------------------------


@api_view("POST")
def reset(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    read_body(request, Nothing)
    return JsonResponse(services.session_reset(agent=agent, key=session, user=user))


@api_view("GET")
def pending(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    row = session_of(agent=agent, key=session, user=user)
    items = []
    for turn in selectors.parked_turns_of(row):
        for request in rules.pending_requests(turn.pending):
            items.append(
                {
                    "turn_id": turn.pk,
                    "request": request,
                    "may_answer": services.may_answer(turn=turn, user=user, request=request),
                }
            )
    return JsonResponse({"pending": items})


@api_view("GET")
async def events(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """The session's event log as SSE after ``Last-Event-ID`` (or ``?after=``), then live."""
    query = read_query(request, EventsQuery)
    try:
        header = parse_seq(read_headers(request, EventsHeaders).last_event_id, name="Last-Event-ID")
        after = header if header is not None else parse_seq(query.after, name="?after=")
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    limit, timeout = query.limit, query.timeout
    await db(session_of)(agent=agent, key=session, user=user)
    follower = SessionFollower(SessionRef(agent, session), after=after or 0)
    await follower.__aenter__()
    # bounded like a turn's stream: an EventSource reconnects with Last-Event-ID by itself
    cap = settings.JUNE_API_STREAM_SECONDS
    stream = event_stream(
        follower,
        until_terminal=query.until == "terminal",
        limit=limit and int(limit),
        max_seconds=min(timeout or cap, cap),
    )
    return StreamingHttpResponse(stream, content_type="text/event-stream", headers=SSE_HEADERS)


@api_view("GET", auth=False)
def openapi_document(request: HttpRequest, user: Any) -> HttpResponse:
    return JsonResponse(document())
