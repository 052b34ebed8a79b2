"""The chat UI's pages (thin: parse, call a selector or service, render).

Live content comes over the websocket (``consumers.py``); these pages render the frame and the
data the script needs, never model or user text into HTML without Django's escaping."""

from __future__ import annotations

import secrets
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents_app.runtime.errors import NotFound
from agents_app.runtime.seams import SessionRef
from sessions_app import models as m
from sessions_app import selectors, services, window, wiring
from sessions_app.outbox import doorbell
from sessions_app.site_errors import AccessDenied, BadRequest
from sessions_app.web import links, search_views


@require_GET
@login_required
def home(request):
    """The user's sessions, per agent, each with a new-session button; with ``?q=``, the hits of
    a search in their messages above them (``web/search_views.py``)."""
    raw = request.GET.get("page", "1")
    page = int(raw) if raw.isdigit() and 0 < len(raw) <= 6 and int(raw) > 0 else 1
    context = search_views.page_context(request)
    status = 400 if context.get("search", {}).get("error") else 200
    return render(
        request,
        "sessions_app/home.html",
        {
            "agents": selectors.agents_with_sessions(user=request.user, agent=request.GET.get("agent"), page=page),
            **context,
        },
        status=status,
    )


@require_GET
@login_required
def agent_sessions(request, agent: str):
    """``/agents/<agent>/`` and ``…/sessions/``: the home page, at the agent's sessions.
    Neither had a page, and APPEND_SLASH redirects only to a path that resolves, so an address
    trimmed from a chat's (``/agents/ops``, ``/agents/ops/sessions/``) was a 404."""
    try:
        wiring.agent(agent, versions=False)
    except NotFound:
        raise Http404("no such agent") from None
    return redirect(f"{reverse('sessions_app:home')}#agent-{quote(agent)}")


@require_POST
@login_required
def session_new(request, agent: str):
    """A new chat at a fresh key: nothing is created until its first message (a rate-limited
    start creates the session), so these posts cost no row, whatever their number."""
    key = secrets.token_hex(4)
    try:
        wiring.agent(agent, versions=False)
    except NotFound:
        raise Http404("no such agent") from None
    return redirect(reverse("sessions_app:chat", kwargs={"agent": agent, "key": key}))


@require_GET
@login_required
def chat(request, agent: str, key: str):
    """One session's chat; its content arrives over the websocket (replayed, then live)."""
    try:
        session = services.session_to_open(agent=agent, key=key, user=request.user)
    except (NotFound, BadRequest):
        raise Http404("no such agent or session") from None
    except AccessDenied as exc:
        raise PermissionDenied(str(exc)) from None
    if session is None:  # a new chat: its first message creates the session (a GET creates nothing)
        session = m.Session(agent=agent, key=key, owner=request.user)
        session.display_title, session.preview = "New session", ""
    config = {
        "agent": agent,
        "key": key,
        "ws_path": links.websocket(agent, key),
        "api_base": links.api_base(),
        "session_api": links.session_api(agent, key),
        "generation": session.generation,
        "user_id": str(request.user.pk),
        "max_text_chars": settings.JUNE_MAX_TEXT_CHARS,
        **_window_config(agent),
        "pending_url": reverse("june_api:pending", kwargs={"agent": agent, "session": key}),
        "archive_url": reverse("sessions_app:archive", kwargs={"agent": agent, "key": key}),
        "attachments_url": reverse("june_api:attachments", kwargs={"agent": agent, "session": key}),
        "attachment_max_bytes": settings.JUNE_ATTACHMENT_MAX_BYTES,
        "attachments_per_message": settings.JUNE_ATTACHMENTS_PER_MESSAGE,
    }
    session.has_turns = session.has_archive = False
    if session.pk is not None:
        selectors.with_titles([session])
        session.has_turns = selectors.has_turns(session)
        session.has_archive = selectors.has_archive(session)
        config["focus"] = focus(session, request.GET.get("at"))
    return render(
        request,
        "sessions_app/chat.html",
        {"session": session, "config": config, "placeholder": placeholder(agent), "hints": hints(agent)},
    )


def placeholder(agent: str) -> str:
    """The composer's placeholder: the agent's own (``placeholder`` in its agent.py)."""
    return wiring.agent(agent).placeholder or f"Message {agent}…"


def hints(agent: str) -> str:
    """The agent's suggestions (``hints`` in its agent.py), never another agent's: a line of its
    own under the composer, which wraps (in the placeholder, two rows of a phone's width cut
    them off)."""
    definition = wiring.agent(agent)
    return f"Try: {', '.join(definition.hints)}" if definition.hints else ""


def focus(session: m.Session, raw: str | None) -> dict | None:
    """The message a search hit opens the chat at (``?at=<index>``, live generation): its index,
    and the turn whose bubble shows it when it is a user's message (the replayed ``turn.started``
    carries no index; an assistant's ``message.completed`` does)."""
    if not raw or not raw.isdigit() or len(raw) > 9:
        return None
    row = selectors.message_at(session, int(raw))
    if row is None:
        return None
    return {"index": row.index, "role": row.role, "turn_id": row.turn_id}


@require_POST
@login_required
def session_title(request, agent: str, key: str):
    """Rename the session (the chat header's form); blank goes back to its first message."""
    try:
        session = services.session_rename(agent=agent, key=key, user=request.user, title=request.POST.get("title", ""))
    except NotFound:
        raise Http404("no such agent or session") from None
    except BadRequest as exc:
        return HttpResponseBadRequest(f"Bad request: {exc}", content_type="text/plain; charset=utf-8")
    except AccessDenied:
        raise PermissionDenied("this session belongs to another user") from None
    # the session's other open tabs show the new title at once
    doorbell.title_changed(SessionRef(agent, key), selectors.with_titles([session])[0].display_title)
    return redirect(reverse("sessions_app:chat", kwargs={"agent": agent, "key": key}))


def _window_config(agent: str) -> dict:
    """The composer refuses, naming the model's window, a message that cannot fit it;
    the server refuses it too (``window.check_fits``)."""
    found = window.room(agent)
    if found is None or found.chars >= settings.JUNE_MAX_TEXT_CHARS:
        return {}
    return {"window_chars": found.chars, "window_tokens": found.window}
