"""Staff search by what was said, across every session and generation (live and archived), and
staff downloads of any generation. Both are pages of the sessions admin (``SessionAdmin.get_urls``
mounts them: ``…/session/search/?q=``, ``…/session/<id>/generation/<g>/export.md|json``), so
``admin_view`` lets in active staff only.

A hit opens the admin generation page at the message's page of the transcript, scrolled to it
(``#m<index>``; the page marks the target).
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from agents_app.runtime import subagents
from sessions_app import export, search
from sessions_app import models as m
from sessions_app.audit import audit_record, audit_staff_read
from sessions_app.models import AuditAction
from sessions_app.site_errors import BadRequest


def hit_url(site_name: str, hit: search.Hit) -> str:
    url = reverse("admin:sessions_app_session_generation", args=[hit.session.pk, hit.generation], current_app=site_name)
    return f"{url}?at={hit.index}#m{hit.index}"  # the page of the transcript that holds it


def hit_label(hit: search.Hit) -> str:
    """``ops/s1#g0``; a subagent's session (an internal ``sub:…`` key) as the session it works for:
    ``researcher, a subagent of ops/s1``."""
    session = hit.session
    if not session.key.startswith(subagents.SESSION_PREFIX):
        return f"{session.agent}/{session.key}#g{hit.generation}"
    child = m.Turn.objects.filter(session=session, parent__isnull=False).select_related("parent__session").first()
    parent = child.parent.session if child is not None and child.parent is not None else None
    where = f"{parent.agent}/{parent.key}" if parent is not None else "a session"
    return f"{session.agent}, a subagent of {where}"


def search_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    """The search form and, with ``?q=``, the newest matching messages (a refusal's words for an
    empty or over-long query, with a 400)."""
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Search messages",
        "query": "",
        "rows": [],
        "more": False,
        "max_query": search.MAX_QUERY_CHARS,
        "searched": "q" in request.GET,
    }
    status = 200
    if "q" in request.GET:
        raw = request.GET.get("q", "")
        try:
            query = search.parse_query(raw)
        except BadRequest as exc:
            context.update(query=raw[: search.MAX_QUERY_CHARS], error=str(exc))
            status = 400
        else:
            hits, more = search.staff_hits(query=query)
            audit_record(action=AuditAction.SEARCH, request=request, detail={"query": query, "hits": len(hits)})
            context.update(
                query=query,
                more=more,
                rows=[
                    {
                        "hit": h,
                        "url": hit_url(model_admin.admin_site.name, h),
                        "label": hit_label(h),
                        "snippet_html": search.highlight(h.text, query),
                    }
                    for h in hits
                ],
            )
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/june_archive/search.html", context, status=status)


def export_view(model_admin: Any, request: HttpRequest, object_id: str, generation: int, fmt: str) -> HttpResponse:
    session = model_admin.get_object(request, object_id)
    if session is None or not model_admin.has_view_permission(request, session):
        raise Http404("no such session")
    if not 0 <= generation <= session.generation:
        raise Http404("no such generation")
    audit_staff_read(request=request, action=AuditAction.EXPORT_READ, session=session, generation=generation)
    return export.download(session, generation, fmt, request=request)
