"""The owner's read-only view of a session's archived generations (what a reset put away).

Staff browse every session's archive in the admin; here the session's owner sees their own:
``/agents/<agent>/sessions/<key>/archive/`` lists the generations, ``…/archive/<g>/`` shows one
as a conversation. Nothing here writes; someone else's session is a 403, as for the chat.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_safe

from agents_app.runtime.errors import NotFound
from sessions_app import listings, selectors, services
from sessions_app.site_errors import AccessDenied, BadRequest


def _session(request, agent: str, key: str):
    try:
        session = services.session_for_user(agent=agent, key=key, user=request.user)
    except (NotFound, BadRequest):
        raise Http404("no such agent or session") from None
    except AccessDenied:
        raise PermissionDenied("this session belongs to another user") from None
    if session is None:
        raise Http404("no such session")
    return session


def with_answers(items: list[dict], answers: list[dict]) -> list[dict]:
    """The transcript with each answer after the last item written before it (the tool call it
    answered; its result comes after)."""
    out: list[dict] = []
    pending = list(answers)
    for item in items:
        at = item.get("created_at")
        while pending and at is not None and pending[0]["created_at"] is not None and pending[0]["created_at"] < at:
            out.append(pending.pop(0))
        out.append(item)
    return out + pending


@require_safe
@login_required
def archive(request, agent: str, key: str):
    session = _session(request, agent, key)
    return render(
        request,
        "sessions_app/archive.html",
        {"session": session, "generations": selectors.archived_generations(session=session)},
    )


@require_safe
@login_required
def archive_generation(request, agent: str, key: str, generation: int):
    session = _session(request, agent, key)
    listed = selectors.archived_generations(session=session)  # newest first
    numbers = [g["generation"] for g in listed]
    if generation not in numbers:
        raise Http404("no such archived generation")
    at = numbers.index(generation)
    return render(
        request,
        "sessions_app/archive_generation.html",
        {
            "session": session,
            "info": listed[at],
            "messages": with_answers(
                selectors.transcript(session=session, generation=generation),
                listings.answers_in(session=session, generation=generation),
            ),
            "newer": numbers[at - 1] if at > 0 else None,
            "older": numbers[at + 1] if at + 1 < len(numbers) else None,
        },
    )
