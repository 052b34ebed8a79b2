"""The approvals API, for answerers who are not the session's owner (an operator's chat bot, a
phone): what the admin approval inbox does, over HTTP.

``GET /api/approvals/`` lists every parked request the caller may answer, across sessions,
oldest first; ``POST /api/approvals/<turn_id>/answer`` ``{input_id, answer}`` answers one. Both
go through the same rule as the inbox — the request's answerers (a named user, or a policy
granted by the agent's ``authorize_answer``, evaluated now); a request without answerers is
listed to its session's owner and to staff — so a request that is not listed cannot be
answered here either. Answers are recorded with ``via="api"``; refusals are the inbox's:
403 (not an allowed answerer), 409 (not waiting, or another input), 422 (the answer fails the
schema), 500 (``authorize_answer`` raised; nothing applied).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from agents_app.runtime import rules
from agents_app.runtime.errors import NotFound, ResumeAuthorizationError
from sessions_app import listings, selectors, services
from sessions_app import models as m
from sessions_app.web import api, links
from sessions_app.web.inputs import read_body
from sessions_app.web.shapes_lists import Approval, ApprovalList
from sessions_app.web.shapes_turns import Answer

#: the most requests one listing returns (oldest first); a longer queue shows its head
MAX_LISTED = 500


def _request(turn: m.Turn, input_id: Any = None) -> dict[str, Any]:
    """The parked request ``input_id`` names (a turn may wait on several: a step's parallel
    calls that each need approval), else its first."""
    owed = rules.pending_requests(turn.pending)
    return next((r for r in owed if r.get("id") == input_id), owed[0] if owed else {})


def may_answer_here(
    turn: m.Turn, user: Any, verdicts: dict[tuple[str, str], bool] | None = None, request: dict[str, Any] | None = None
) -> bool:
    """The listing rule (see the module doc). ``verdicts`` caches policy verdicts per (agent,
    rule): they depend on nothing else."""
    request = request if request is not None else _request(turn)
    rule = request.get("answerers") or None
    if not rule:
        return turn.session.owner_id == user.pk or bool(user.is_staff)
    key = (turn.session.agent, json.dumps(rule, sort_keys=True, default=str))
    if verdicts is not None and key in verdicts and "policy" in rule:
        return verdicts[key]
    verdict = services.may_answer(turn=turn, user=user, request=request)
    if verdicts is not None and "policy" in rule:
        verdicts[key] = verdict
    return verdict


def approval_json(turn: m.Turn, request: dict[str, Any]) -> Approval:
    pending = turn.pending or {}
    call = pending.get("call") or {}
    if request.get("kind") == "tool_approval":  # its own call, of the step's several
        call = {"name": request.get("tool"), "input": request.get("input")}
    agent, key = turn.session.agent, turn.session.key
    return {
        "turn_id": turn.pk,
        "agent": agent,
        "session": key,
        "request": request,
        "call": {"name": call.get("name"), "input": call.get("input")},
        "requested_by": listings.requested_by(turn),
        "parked_at": turn.parked_at.isoformat() if getattr(turn, "parked_at", None) else None,
        "turn_url": links.turn_api(agent, key, turn.pk),
        "answer_url": reverse("june_api:approval-answer", kwargs={"turn_id": turn.pk}),
    }


@api.api_view("GET")
def approval_list(request: HttpRequest, user: Any) -> HttpResponse:
    verdicts: dict[tuple[str, str], bool] = {}
    items: list[Approval] = []
    for turn in listings.parked_requests().iterator(chunk_size=200):
        for request in rules.pending_requests(turn.pending):
            if may_answer_here(turn, user, verdicts, request):
                items.append(approval_json(turn, request))
        if len(items) >= MAX_LISTED:
            break
    listed: ApprovalList = {"approvals": items[:MAX_LISTED]}
    return JsonResponse(listed)


@api.api_view("POST")
def approval_answer(request: HttpRequest, user: Any, turn_id: str) -> HttpResponse:
    body = read_body(request, Answer)
    turn = selectors.turn_with_session(turn_id) if api.TURN_ID_RE.fullmatch(turn_id) else None
    if turn is None:
        raise NotFound(f"no turn {turn_id}")
    # a request without answerers is not listed to everyone, so it is not answerable by everyone
    # either; a named user or a policy is decided by turn_resume (a raising authorize_answer: 500)
    asked = _request(turn, body.input_id)
    if (
        turn.status == m.TurnStatus.SUSPENDED
        and turn.pending
        and not asked.get("answerers")
        and not may_answer_here(turn, user, request=asked)
    ):
        raise ResumeAuthorizationError("you may not answer this request")
    services.turn_resume(
        turn_id=turn_id,
        input_id=body.input_id,
        answer=body.answer,
        user=user,
        via="api",
        remote_addr=str(request.META.get("REMOTE_ADDR") or "")[:64],
        check_session_access=False,
    )
    turn = api.load_turn(turn_id)
    return api.turn_response(turn, request, agent=turn.session.agent, key=turn.session.key)
