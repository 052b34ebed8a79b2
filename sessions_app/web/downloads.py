"""Downloads of a conversation for its owner: the live generation
(``…/sessions/<key>/export.md|json``), an archived one (``…/archive/<g>/export.md|json``) and
``GET /api/agents/<agent>/sessions/<key>/export?format=md|json[&generation=<g>]``.

Always ``Content-Disposition: attachment``. Someone else's session is a 404 on the pages (a
download link says nothing about whose a key is) and the API's 403, as every session route of
the API answers. Staff download any generation from the admin (``admin/search_admin.py``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from agents_app.runtime.errors import NotFound
from sessions_app import export, services
from sessions_app import models as m
from sessions_app.site_errors import AccessDenied, BadRequest
from sessions_app.web import api
from sessions_app.web.inputs import read_query
from sessions_app.web.shapes_lists import GENERATION_RE, ExportQuery


def _own(request: HttpRequest, agent: str, key: str) -> m.Session:
    try:
        session = services.session_for_user(agent=agent, key=key, user=request.user)
    except (NotFound, BadRequest, AccessDenied):
        session = None
    if session is None:
        raise Http404("no such session")
    return session


@require_safe
@login_required
def export_live(request: HttpRequest, agent: str, key: str, fmt: str) -> HttpResponse:
    session = _own(request, agent, key)
    return export.download(session, session.generation, fmt, request=request)


@require_safe
@login_required
def export_archived(request: HttpRequest, agent: str, key: str, generation: int, fmt: str) -> HttpResponse:
    session = _own(request, agent, key)
    if not 0 <= generation < session.generation:
        raise Http404("no such archived generation")
    return export.download(session, generation, fmt, request=request)


@api.api_view("GET")
def api_export(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """The live generation, or ``?generation=`` an archived one, as ``?format=json`` (default) or ``md``."""
    row = api.session_of(agent=agent, key=session, user=user)
    query = read_query(request, ExportQuery)
    fmt, raw = query.format, query.generation
    generation = row.generation
    if raw is not None:
        if not GENERATION_RE.fullmatch(raw):
            raise BadRequest("?generation= must be a generation number")
        if int(raw) > row.generation:
            raise NotFound(f"no generation {raw} in this session")
        generation = int(raw)
    return export.download(row, generation, fmt, request=request)
