"""A person's search in their own sessions: the session list's search box (``/?q=``) and
``GET /api/search?q=`` (JSON). Both read ``sessions_app.search.owner_hits`` (the live
generation of the caller's sessions only) and link each hit to the chat at that message
(``…/sessions/<key>/?at=<index>#m<index>``: the chat scrolls to it and flashes it).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from sessions_app import search, selectors
from sessions_app.site_errors import BadRequest
from sessions_app.web import api
from sessions_app.web.inputs import read_query
from sessions_app.web.shapes_lists import Hit, SearchQuery, SearchResults


def hit_url(hit: search.Hit) -> str:
    """The chat page opened at the hit's message."""
    chat = reverse("sessions_app:chat", kwargs={"agent": hit.session.agent, "key": hit.session.key})
    return f"{chat}?at={hit.index}#m{hit.index}"


def results(*, user: Any, raw_query: Any) -> dict[str, Any]:
    """The hits of ``raw_query`` in the user's sessions, as both entry points show them: each
    with its session's display title, a plain snippet and the snippet as escaped HTML with
    ``<mark>`` around the matches. BadRequest for an empty or over-long query."""
    query = search.parse_query(raw_query)
    hits, more = search.owner_hits(user=user, query=query)
    selectors.with_titles(list({id(h.session): h.session for h in hits}.values()))
    rows = []
    for hit in hits:
        plain, _ = search.snippet(hit.text, query)
        rows.append(
            {
                "hit": hit,
                "title": hit.session.display_title,
                "snippet": plain,
                "snippet_html": search.highlight(hit.text, query),
                "url": hit_url(hit),
            }
        )
    return {"query": query, "rows": rows, "more": more}


def page_context(request: HttpRequest) -> dict[str, Any]:
    """The session list's search part: nothing without ``?q=``, the hits, or the refusal's words."""
    if "q" not in request.GET:
        return {}
    raw = request.GET.get("q", "")
    try:
        return {"search": results(user=request.user, raw_query=raw)}
    except BadRequest as exc:
        return {"search": {"query": raw[: search.MAX_QUERY_CHARS], "error": str(exc), "rows": [], "more": False}}


def hit_json(row: dict[str, Any]) -> Hit:
    hit: search.Hit = row["hit"]
    return {
        "agent": hit.session.agent,
        "session": hit.session.key,
        "title": row["title"],
        "index": hit.index,
        "role": hit.role,
        "turn_id": hit.turn_id,
        "created_at": hit.created_at.isoformat(),
        "snippet": row["snippet"],
        "snippet_html": str(row["snippet_html"]),
        "url": row["url"],
    }


@api.api_view("GET")
def api_search(request: HttpRequest, user: Any) -> HttpResponse:
    """``GET /api/search?q=``: the caller's own sessions' messages that match, newest first."""
    found = results(user=user, raw_query=read_query(request, SearchQuery).q)
    shown: SearchResults = {
        "query": found["query"],
        "results": [hit_json(r) for r in found["rows"]],
        "more": found["more"],
    }
    return JsonResponse(shown)
