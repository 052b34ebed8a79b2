"""The HTTP API of a conversation's branches (routes: ``api_urls``; the contract: ``openapi``):
edit an earlier message (a fork), regenerate the last reply, list and switch branches.

Thin entry points, as ``api``'s: parse, call a service or selector, render. A fork or a
regenerate answers 202 with the queued turn (follow it with ``GET turns/<id>`` or the events);
each refuses with 409 while the session has a turn queued, running or parked."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from agents_app.runtime.errors import NotFound
from agents_app.runtime.seams import TurnRecord
from sessions_app import attachment_services, selectors, services
from sessions_app.web import links
from sessions_app.web.api import TURN_ID_RE, api_view, session_of
from sessions_app.web.inputs import read_body
from sessions_app.web.shapes_branches import NUMBER_RE, Branches, BranchQueued, Fork, Switched
from sessions_app.web.shapes_turns import Nothing


def _number(raw: str, what: str) -> int:
    if not NUMBER_RE.fullmatch(raw):
        raise NotFound(f"no {what} {raw[:40]!r}")
    return int(raw)


def _queued(record: TurnRecord, agent: str, key: str) -> JsonResponse:
    queued: BranchQueued = {"turn_id": record.turn_id, "status": str(record.status), "generation": record.generation}
    return JsonResponse(
        queued,
        status=202,
        headers={"Location": links.turn_api(agent, key, record.turn_id)},
    )


@api_view("GET")
def branch_list(request: HttpRequest, user: Any, agent: str, session: str) -> HttpResponse:
    """The live branch, its tree, and the switchers of its messages (``selectors.branches_of``)."""
    branches: Branches = selectors.branches_of(session=session_of(agent=agent, key=session, user=user))
    return JsonResponse(branches)


@api_view("POST")
def message_fork(request: HttpRequest, user: Any, agent: str, session: str, index: str) -> HttpResponse:
    """Edit message ``index`` (a person's, that opened a turn): a new branch from just before
    it, live, whose first turn sends ``text``."""
    at = _number(index, "message")
    body = read_body(request, Fork)
    ids = attachment_services.parse_ids(body.attachments)
    record = services.branch_fork(
        agent=agent,
        key=session,
        at=at,
        text=body.text if body.text is not None or not ids else "",
        user=user,
        source="http",
        attachments=ids,
    )
    return _queued(record, agent, session)


@api_view("POST")
def turn_regenerate(request: HttpRequest, user: Any, agent: str, session: str, turn_id: str) -> HttpResponse:
    """Send the live branch's last turn again, as the first turn of a new branch."""
    read_body(request, Nothing)
    if not TURN_ID_RE.fullmatch(turn_id):
        raise NotFound(f"no turn {turn_id[:40]!r} in this session")
    record = services.turn_regenerate(agent=agent, key=session, turn_id=turn_id, user=user, source="http")
    return _queued(record, agent, session)


@api_view("POST")
def branch_switch(request: HttpRequest, user: Any, agent: str, session: str, generation: str) -> HttpResponse:
    """Make branch ``generation`` live (one of the live branch's tree)."""
    read_body(request, Nothing)
    number = _number(generation, "branch")
    switched: Switched = {"generation": services.branch_switch(agent=agent, key=session, generation=number, user=user)}
    return JsonResponse(switched)
