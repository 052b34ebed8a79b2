"""The HTTP API's lists: ``GET /api/agents/<agent>/sessions/`` (the caller's sessions, newest
activity first) and ``GET …/sessions/<key>/turns`` (a session's turns, newest first), both
paginated by an opaque cursor (``?cursor=`` from the previous page's ``next``) and ``?limit=``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse, JsonResponse

from sessions_app import attachment_services, listings, selectors, wiring
from sessions_app import models as m
from sessions_app.site_errors import BadRequest
from sessions_app.web import api, api_turns, links
from sessions_app.web.bodylimit import max_body
from sessions_app.web.inputs import read_query
from sessions_app.web.shapes_lists import (
    SESSION_CURSOR_RE,
    TURN_CURSOR_RE,
    ListedTurn,
    SessionPage,
    SessionPageQuery,
    SessionSummary,
    TurnPage,
    TurnPageQuery,
)


def page_limit(query: SessionPageQuery) -> int:
    return int(query.limit) if query.limit else listings.PAGE_DEFAULT


def _next_url(request: HttpRequest, cursor: str, limit: int) -> str:
    query = {"cursor": cursor}
    if "limit" in request.GET:
        query["limit"] = str(limit)
    return f"{request.path}?{urlencode(query)}"


def _session_cursor(session: m.Session) -> str:
    micros = int(session.updated_at.timestamp() * 1_000_000)
    return f"{micros}.{session.pk}"


def _parse_session_cursor(raw: str | None) -> tuple[datetime, int] | None:
    if raw is None:
        return None
    match = SESSION_CURSOR_RE.fullmatch(raw)
    if not match:
        raise BadRequest("?cursor= is not a cursor this API handed out")
    micros, pk = int(match[1]), int(match[2])
    try:
        at = datetime.fromtimestamp(micros / 1_000_000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise BadRequest("?cursor= is not a cursor this API handed out") from None
    return at, pk


def session_json(session: m.Session, last: m.Turn | None) -> SessionSummary:
    return {
        "agent": session.agent,
        "session": session.key,
        # the title the chat shows: the one given, else the first message's (selectors.with_titles)
        "title": getattr(session, "display_title", None) or session.title or session.key,
        "status": session.status,
        "generation": session.generation,
        "preview": selectors.preview(last),
        "last_turn": None if last is None else {"turn_id": last.pk, "status": last.status},
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
        "url": links.session_api(session.agent, session.key),
    }


@api.api_view("GET")
def session_list(request: HttpRequest, user: Any, agent: str) -> HttpResponse:
    """The caller's sessions of ``agent``, most recent activity first."""
    wiring.agent(agent, versions=False)  # NotFound for an unknown agent (an eval's version too)
    query = read_query(request, SessionPageQuery)
    limit = page_limit(query)
    rows, last, more = listings.session_page(
        user=user, agent=agent, limit=limit, before=_parse_session_cursor(query.cursor)
    )
    selectors.with_titles(rows)
    page: SessionPage = {
        "sessions": [session_json(s, last.get(s.pk)) for s in rows],
        "next": _next_url(request, _session_cursor(rows[-1]), limit) if more and rows else None,
    }
    return JsonResponse(page)


@api.api_view("GET")
def session_detail(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """One of the caller's sessions (what each entry of the session list's ``url`` points to)."""
    row = api.session_of(agent=agent, key=session, user=user)
    selectors.with_titles([row])
    last = selectors.last_turn(row)
    return JsonResponse(session_json(row, last))


def turn_list_json(turn: m.Turn) -> ListedTurn:
    return {
        **api.turn_json(turn),
        "input_text": str((turn.input or {}).get("text") or ""),
        "source": turn.source,
        "order": turn.order,
    }


@api.api_view("GET")
def turn_list(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """The session's turns of its live generation, newest first."""
    row = api.session_of(agent=agent, key=session, user=user)
    query = read_query(request, TurnPageQuery)
    limit, raw = page_limit(query), query.cursor
    if raw is not None and not TURN_CURSOR_RE.fullmatch(raw):
        raise BadRequest("?cursor= is not a cursor this API handed out")
    rows, more = listings.turn_page(session=row, limit=limit, before=int(raw) if raw is not None else None)
    page: TurnPage = {
        "turns": [turn_list_json(t) for t in rows],
        "next": _next_url(request, str(rows[-1].order), limit) if more and rows else None,
    }
    return JsonResponse(page)


@max_body(attachment_services.max_body_bytes)  # a multipart start (api_turns.turns)
def turns_collection(request: HttpRequest, **kwargs: Any) -> HttpResponse:
    """``…/turns``: GET lists the session's turns, POST starts one (``api_turns.turns``); on the
    request's thread, where the site's middleware runs (``syncstack``)."""
    if request.method in ("GET", "HEAD"):
        return turn_list(request, **kwargs)
    if request.method == "POST":
        return api_turns.turns(request, **kwargs)
    return api.error_response(405, "method_not_allowed", f"{request.method} is not allowed here", Allow="GET, POST")


turns_collection.csrf_exempt = True  # type: ignore[attr-defined] (api_view checks CSRF for cookie callers)
