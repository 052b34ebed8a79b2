"""Pages of the HTTP API's lists (``GET …/sessions/``, ``GET …/turns``, ``GET /api/approvals/``)
and the queue and inbox reads that go with them: keyword-only reads, no writes."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from sessions_app import models as m

PAGE_DEFAULT = 50
PAGE_MAX = 200


def session_page(
    *, user: Any, agent: str | None = None, limit: int = PAGE_DEFAULT, before: tuple[Any, int] | None = None
) -> tuple[list[m.Session], dict[int, m.Turn], bool]:
    """One page of the user's sessions, most recent activity (``updated_at``) first, after the
    cursor ``before`` = (updated_at, pk) of the last row of the previous page. Returns the rows,
    each session's last turn of its live generation (by session pk, for the preview) and whether
    more rows follow."""
    qs = m.Session.objects.filter(owner=user)
    if agent is not None:
        qs = qs.filter(agent=agent)
    if before is not None:
        at, pk = before
        qs = qs.filter(Q(updated_at__lt=at) | Q(updated_at=at, pk__lt=pk))
    last = (
        m.Turn.objects.filter(session=OuterRef("pk"), generation=OuterRef("generation"))
        .order_by("-order")
        .values("id")[:1]
    )
    rows = list(qs.annotate(last_turn_id=Subquery(last)).order_by("-updated_at", "-pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    turns = m.Turn.objects.in_bulk([r.last_turn_id for r in rows if r.last_turn_id])
    return rows, {r.pk: turns[r.last_turn_id] for r in rows if r.last_turn_id in turns}, more


def turn_page(
    *, session: m.Session, limit: int = PAGE_DEFAULT, before: int | None = None, generation: int | None = None
) -> tuple[list[m.Turn], bool]:
    """One page of a session's turns (its live generation unless ``generation``), newest first,
    before the turn ``order`` ``before``. Returns the rows and whether more follow."""
    qs = m.Turn.objects.filter(session=session, generation=session.generation if generation is None else generation)
    if before is not None:
        qs = qs.filter(order__lt=before)
    rows = list(qs.order_by("-order")[: limit + 1])
    for turn in rows:
        turn.session = session
    return rows[:limit], len(rows) > limit


#: the source of an eval run's turns (``june_evals.driver``): their requests wait for no person —
#: the run scores a parked case as it stands, so none is listed, counted or notified meanwhile
#: (an operator's Approve would run a test case's tool)
EVAL_SOURCE = "eval"


def parked_requests():
    """Every parked input of a live generation, oldest first, with when it parked (``parked_at``)
    — the approval inbox and ``GET /api/approvals/`` list these, filtered by who may answer."""
    parked_at = (
        m.Event.objects.filter(
            session_id=OuterRef("session_id"),
            generation=OuterRef("generation"),
            turn_id=m.AsTurnRef(OuterRef("pk")),
            type="input.requested",
        )
        .order_by("-seq")
        .values("created_at")[:1]
    )
    return (
        m.ApprovalRequest.objects.select_related("session", "created_by")
        .filter(
            status=m.TurnStatus.SUSPENDED, pending__isnull=False, generation=F("session__generation"), waiting=0
        )  # a parent parked on its children waits for no person
        .exclude(source=EVAL_SOURCE)
        .annotate(parked_at=Coalesce(Subquery(parked_at), F("updated_at")))
        .order_by("parked_at", "pk")
    )


def requested_by(turn: m.Turn) -> str:
    """Who started the turn that asks, in plain words: the speaker's name, the account, or what
    started it when nobody did (``started_by``)."""
    speaker = (turn.input or {}).get("user") or {}
    username = turn.created_by.get_username() if turn.created_by_id and turn.created_by is not None else ""
    return started_by(
        speaker=speaker if isinstance(speaker, dict) else {},
        username=username,
        by=str((turn.input or {}).get("by") or ""),
        source=turn.source or "",
    )


#: what started a turn no person started by name, by its ``source``
SOURCES = {
    "webhook": "a webhook call",
    "schedule": "a schedule",
    "eval": "an eval run (no person)",
    "spawn": "its parent agent (a subagent's turn)",
    "cli": "the command line (manage.py june)",
    "http": "an API call with no user",
    "web": "the chat, with no user",
}


def started_by(*, speaker: dict[str, Any], username: str, by: str, source: str) -> str:
    """A turn's starter as the inbox and the dashboard say it: a person's name (a webhook's
    named user says so), the account, the schedule (``by``: ``cron:<name>``), else what its
    ``source`` says, never a bare internal word such as "inbound"."""
    name = str(speaker.get("name") or "")
    if str(speaker.get("id") or "").startswith("webhook:"):
        return "a webhook call (no user named)" if speaker["id"] == "webhook:anonymous" else f"{name} (by webhook)"
    if name:
        return name
    if username:
        return username
    if by.startswith("cron:"):
        return f"the schedule {by.removeprefix('cron:')}"
    if by:
        return f"the trigger {by}"
    return SOURCES.get(source, f"{source} (no person)" if source else "nobody (no user, webhook or schedule)")


def queued_turns(*, agent: str, key: str) -> list[dict[str, Any]]:
    """The live generation's turns still waiting to start, in chain order, as the chat shows
    them under the log (``turn.started`` moves each into it): sent with the websocket's
    ``ready`` frame, so a reload shows what is queued too."""
    rows = (
        m.Turn.objects.filter(
            session__agent=agent,
            session__key=key,
            status=m.TurnStatus.QUEUED,
            generation=F("session__generation"),
            attempts=0,
        )
        .order_by("order")
        .values_list("id", "input", "kind")[:100]
    )
    return [
        {"turn_id": turn_id, "text": str((data or {}).get("text") or ""), "kind": kind} for turn_id, data, kind in rows
    ]


# -- answers, as the user's archive shows them ---------------------------------------------------------

VIA_WORDS = {"admin": " in the admin inbox", "api": " over the API", "web": " in the chat"}


def answer_text(*, answer: Any, who: str, via: str | None) -> str:
    """An answer in words, as the chat's approval card says it: "Approved by operator in the
    admin inbox.", "Rejected by operator: not this month", "Edited and approved by …: {…}"."""
    how = VIA_WORDS.get(via or "", "")
    if answer is True:
        return f"Approved by {who}{how}."
    if answer is False:
        return f"Denied by {who}{how}."
    if answer is None:
        return f"Answered by {who}{how}."
    decision = answer.get("decision") if isinstance(answer, dict) else None
    if decision == "approve":
        return f"Approved by {who}{how}."
    if decision == "edit":
        return f"Edited and approved by {who}{how}: {json.dumps(answer.get('input'), default=str)}"
    if decision == "reject":
        note = str(answer.get("message") or "")
        return f"Rejected by {who}{how}" + (f": {note}" if note else ".")
    return f"Answered by {who}{how}: {json.dumps(answer, default=str)}"


def answers_in(*, session: m.Session, generation: int) -> list[dict[str, Any]]:
    """The answers given to the generation's parked turns, oldest first, each as a transcript
    item (``role`` "answer", ``created_at``, ``text``; ``prompt``: what was asked)."""
    rows = (
        m.Answer.objects.filter(turn__session=session, turn__generation=generation)
        .select_related("user")
        .order_by("created_at", "pk")
    )
    out = []
    for a in rows:
        who = (a.user.get_username() if a.user is not None else "") or a.by or "someone"
        out.append(
            {"role": "answer", "created_at": a.created_at, "text": answer_text(answer=a.answer, who=who, via=a.via)}
        )
    return out
