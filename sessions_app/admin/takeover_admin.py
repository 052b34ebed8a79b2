"""Takeover in the admin (docs/operations.md "Takeover"): the session page's panel and its three
POSTs (``SessionAdmin.get_urls`` mounts them under ``…/session/<id>/takeover/``): take over
(``running``: cancel the running turn, or let it finish), say (the form's fallback; the page
writes over the session's websocket), hand back. Each answers with a redirect to the session
page and a message; a refusal is a page saying why, with its status (403, 409, 400)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from agents_app.runtime.errors import JuneError
from sessions_app import models as m
from sessions_app import takeover


def panel(session: m.Session, user: Any) -> dict[str, Any]:
    """The session page's takeover context: who has it since when, whether this user may take
    it over (or holds it), the websocket path the live panel uses."""
    row = takeover.open_takeover(session)
    return {
        "takeover": row,
        "takeover_mine": row is not None and row.operator_id == user.pk,
        "may_take_over": row is None and takeover.may_take_over(session=session, user=user),
        "takeover_ws": f"/ws/agents/{session.agent}/sessions/{session.key}/",
        # the files the user sends come as ids: the panel links each under this path
        "takeover_files": reverse("june_api:attachments", kwargs={"agent": session.agent, "session": session.key}),
        "takeovers_before": list(
            m.Takeover.objects.filter(session=session, ended_at__isnull=False).order_by("-started_at")[:5]
        ),
    }


def _session(model_admin: Any, request: HttpRequest, object_id: str) -> m.Session:
    session = model_admin.get_object(request, object_id)
    if session is None or not model_admin.has_view_permission(request, session):
        raise Http404("no such session")
    return session


def _back(model_admin: Any, session: m.Session) -> HttpResponseRedirect:
    return HttpResponseRedirect(
        reverse("admin:sessions_app_session_change", args=[session.pk], current_app=model_admin.admin_site.name)
        + "#june-takeover"
    )


def _run(model_admin: Any, request: HttpRequest, object_id: str, act: Any, done: str) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    session = _session(model_admin, request, object_id)
    try:
        act(session)
    except JuneError as exc:  # 403 (no grant, not the holder), 409 (taken already), 400
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": "Not available",
            "reason": str(exc),
        }
        return TemplateResponse(request, "admin/june/approval_refused.html", context, status=exc.http_status)
    model_admin.message_user(request, done, messages.SUCCESS)
    return _back(model_admin, session)


def begin_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    running = request.POST.get("running", "cancel")
    return _run(
        model_admin,
        request,
        object_id,
        lambda s: takeover.takeover_begin(session=s, user=request.user, running=running, request=request),
        "You have taken this conversation over: its user's messages come to you until you hand it back.",
    )


def say_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    return _run(
        model_admin,
        request,
        object_id,
        lambda s: takeover.person_says(session=s, user=request.user, text=request.POST.get("text", "")),
        "Sent.",
    )


def end_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    return _run(
        model_admin,
        request,
        object_id,
        lambda s: takeover.takeover_end(session=s, user=request.user, request=request),
        "Handed back: the agent answers the next message.",
    )
