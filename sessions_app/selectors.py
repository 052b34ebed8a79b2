"""Reads used by the chat UI and the websocket consumer (keyword-only, typed, no writes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from agents_app.runtime.seams import LoggedEvent, SessionRef

from sessions_app import models as m
from sessions_app import wiring

EVENT_BATCH = 500


def sessions_for_user(*, user: Any, agent: str | None = None, limit: int = 200) -> list[m.Session]:
    """The user's own sessions, most recently active first."""
    qs = m.Session.objects.filter(owner=user)
    if agent is not None:
        qs = qs.filter(agent=agent)
    return list(qs.order_by("-updated_at")[:limit])


@dataclass(frozen=True)
class AgentSessions:
    name: str
    description: str
    sessions: list[m.Session]


def agents_with_sessions(*, user: Any) -> list[AgentSessions]:
    """Every agent of the site with the user's sessions of it (the chat home page)."""
    mine: dict[str, list[m.Session]] = {}
    for s in sessions_for_user(user=user):
        mine.setdefault(s.agent, []).append(s)
    out = []
    for name, definition in sorted(wiring.agents().items()):
        description = getattr(definition, "description", "") or ""
        out.append(AgentSessions(name, description, mine.get(name, [])))
    return out


def events_since(*, agent: str, key: str, after: int, limit: int = EVENT_BATCH) -> list[dict[str, Any]]:
    """The live generation's logged events after ``after`` as JSON frames (``seq`` included)."""
    logged: list[LoggedEvent] = wiring.store().events_sync(SessionRef(agent, key), after, limit)
    return [{"seq": e.seq, **e.event.to_json()} for e in logged]


def session_last_seq(*, agent: str, key: str) -> int:
    """The last sequence number handed out in the session (0 for none)."""
    return m.Session.objects.filter(agent=agent, key=key).values_list("event_seq", flat=True).first() or 0


# -- pages of the HTTP API's lists (issue 17: GET …/sessions/, GET …/turns, GET /api/approvals/) --

PAGE_DEFAULT = 50
PAGE_MAX = 200
PREVIEW_CHARS = 160


def preview(turn: m.Turn | None) -> str:
    if turn is None:
        return ""
    text = (turn.text or "").strip() or str((turn.input or {}).get("text") or "").strip()
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def session_page(*, user: Any, agent: str | None = None, limit: int = PAGE_DEFAULT,
                 before: tuple[Any, int] | None = None) -> tuple[list[m.Session], dict[int, m.Turn], bool]:
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
    last = (m.Turn.objects.filter(session=OuterRef("pk"), generation=OuterRef("generation"))
            .order_by("-order").values("id")[:1])
    rows = list(qs.annotate(last_turn_id=Subquery(last)).order_by("-updated_at", "-pk")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    turns = m.Turn.objects.in_bulk([r.last_turn_id for r in rows if r.last_turn_id])
    return rows, {r.pk: turns[r.last_turn_id] for r in rows if r.last_turn_id in turns}, more


def turn_page(*, session: m.Session, limit: int = PAGE_DEFAULT, before: int | None = None,
              generation: int | None = None) -> tuple[list[m.Turn], bool]:
    """One page of a session's turns (its live generation unless ``generation``), newest first,
    before the turn ``order`` ``before``. Returns the rows and whether more follow."""
    qs = m.Turn.objects.filter(session=session,
                               generation=session.generation if generation is None else generation)
    if before is not None:
        qs = qs.filter(order__lt=before)
    rows = list(qs.order_by("-order")[: limit + 1])
    for turn in rows:
        turn.session = session
    return rows[:limit], len(rows) > limit


def parked_requests():
    """Every parked input of a live generation, oldest first, with when it parked (``parked_at``)
    — the approval inbox and ``GET /api/approvals/`` list these, filtered by who may answer."""
    parked_at = (m.Event.objects.filter(turn_id=OuterRef("pk"), type="input.requested")
                 .order_by("-seq").values("created_at")[:1])
    return (m.ApprovalRequest.objects.select_related("session", "created_by")
            .filter(status=m.TurnStatus.SUSPENDED, pending__isnull=False, generation=F("session__generation"))
            .annotate(parked_at=Coalesce(Subquery(parked_at), F("updated_at")))
            .order_by("parked_at", "pk"))


def requested_by(turn: m.Turn) -> str:
    """Who started the turn that asks: the speaker's name, the account, or the trigger."""
    speaker = (turn.input or {}).get("user") or {}
    if isinstance(speaker, dict) and speaker.get("name"):
        return str(speaker["name"])
    if turn.created_by_id and turn.created_by is not None:
        return turn.created_by.get_username()
    by = (turn.input or {}).get("by")
    return str(by) if by else (turn.kind or turn.source or "")
