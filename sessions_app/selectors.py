"""Reads used by the chat UI and the websocket consumer (keyword-only, typed, no writes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents_app.runtime import subagents
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
        if not s.key.startswith(subagents.SESSION_PREFIX):  # children show in their parent's chat
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


def children_started(*, agent: str, key: str) -> list[dict[str, Any]]:
    """The children the live generation's turns spawned (``child.started`` events): the
    references a client follows to their own events (docs/subagents.md)."""
    s = m.Session.objects.filter(agent=agent, key=key).first()
    if s is None:
        return []
    rows = m.Event.objects.filter(session=s, generation=s.generation, type="child.started").order_by("seq")
    return [{**(data.get("child") or {}), "parent_turn": turn_id, "call_id": data.get("call_id")}
            for turn_id, data in rows.values_list("turn_id", "data")]
