"""Reads used by the chat UI and the websocket consumer (keyword-only, typed, no writes)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F
from django.utils import timezone

from agents_app.models import DeliveryStatus, WebhookDelivery
from agents_app.runtime import branches, subagents
from agents_app.runtime.seams import LoggedEvent, SessionRef
from sessions_app import models as m
from sessions_app import pricing, wiring

EVENT_BATCH = 500
PREVIEW_CHARS = 160


def preview(turn: m.Turn | None) -> str:
    if turn is None:
        return ""
    text = (turn.text or "").strip() or str((turn.input or {}).get("text") or "").strip()
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def sessions_for_user(*, user: Any, agent: str | None = None, limit: int = 200) -> list[m.Session]:
    """The user's own sessions, most recently active first, each with ``display_title`` (its
    title, else its first message, else its key) and ``preview`` (its last turn's reply)."""
    qs = m.Session.objects.filter(owner=user)
    if agent is not None:
        qs = qs.filter(agent=agent)
    return with_titles(list(qs.order_by("-updated_at")[:limit]))


TITLE_CHARS = 60


def title_from(text: str) -> str:
    """A session title from a message: its first line, shortened at a word."""
    line = " ".join(str(text or "").split())
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[: TITLE_CHARS - 1].rsplit(" ", 1)[0] or line[: TITLE_CHARS - 1]
    return cut + "…"


#: a status in the words the chat uses for it (static/june/chat/words.js's TAGS): one vocabulary for a person
STATUS_WORDS = {"suspended": "waiting for an answer", "new": "new", "idle": "idle"}


def with_titles(rows: list[m.Session]) -> list[m.Session]:
    """Set ``display_title``, ``preview`` and ``shown_status`` on sessions (two queries for any
    number of rows). ``shown_status`` is the session's, except that an idle session whose last
    turn was cancelled or failed says so (it read "idle")."""
    ids = [s.pk for s in rows]
    if not ids:
        return rows
    first: dict[int, str] = {}
    for session_id, data in (
        m.Turn.objects.filter(session_id__in=ids, kind="inbound")
        .order_by("session_id", "order")
        .values_list("session_id", "input")
    ):
        first.setdefault(session_id, str((data or {}).get("text") or ""))
    last: dict[int, m.Turn] = {}
    for turn in (
        m.Turn.objects.filter(session_id__in=ids, generation=F("session__generation"))
        .order_by("session_id", "-order")
        .only("session_id", "text", "input", "order", "status")
    ):
        last.setdefault(turn.session_id, turn)
    for s in rows:
        s.display_title = s.title or title_from(first.get(s.pk, "")) or s.key
        s.preview = preview(last.get(s.pk))
        ended = getattr(last.get(s.pk), "status", None)
        s.shown_status = ended if s.status == "idle" and ended in ("cancelled", "failed") else s.status
        s.status_words = STATUS_WORDS.get(s.shown_status, s.shown_status)
    return rows


@dataclass(frozen=True)
class AgentSessions:
    name: str
    description: str
    sessions: list[m.Session]
    listed: bool = True  # an unlisted (internal) agent is shown for its sessions, never offered anew
    page: int = 1
    more: bool = False  # an older page follows (``?agent=<name>&page=<page + 1>``)


HOME_PAGE = 20  # sessions per agent on a page of the chat home


def agents_with_sessions(*, user: Any, agent: str | None = None, page: int = 1) -> list[AgentSessions]:
    """Every agent of the site with a page of the user's sessions of it (the chat home page):
    the newest ``HOME_PAGE``, or page ``page`` of ``agent``'s."""
    qs = m.Session.objects.filter(owner=user).exclude(key__startswith=subagents.SESSION_PREFIX)
    names = list(qs.values_list("agent", flat=True).distinct())
    mine: dict[str, tuple[list[m.Session], int, bool]] = {}
    for name in names:  # one query an agent (a handful), children show in their parent's chat
        n = page if name == agent else 1
        rows = list(qs.filter(agent=name).order_by("-updated_at", "-pk")[(n - 1) * HOME_PAGE : n * HOME_PAGE + 1])
        mine[name] = (with_titles(rows[:HOME_PAGE]), n, len(rows) > HOME_PAGE)
    for sessions, _, _ in mine.values():  # sessions of one title are told apart by their key
        seen = Counter(s.display_title for s in sessions)
        for s in sessions:
            s.same_title = seen[s.display_title] > 1
    out = []
    for name, definition in sorted(wiring.agents().items()):
        if not definition.listed and name not in mine:  # an internal agent, never offered
            continue
        description = getattr(definition, "description", "") or ""
        sessions, n, more = mine.get(name, ([], 1, False))
        out.append(AgentSessions(name, description, sessions, bool(definition.listed), n, more))
    return out


def events_since(*, agent: str, key: str, after: int, limit: int = EVENT_BATCH) -> list[dict[str, Any]]:
    """The live generation's logged events after ``after`` as JSON frames (``seq`` included)."""
    logged: list[LoggedEvent] = wiring.store().events_sync(SessionRef(agent, key), after, limit)
    return [e.frame() for e in logged]  # each with ``at``, when it was committed (the chat shows it)


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
    return [
        {**(data.get("child") or {}), "parent_turn": turn_id, "call_id": data.get("call_id")}
        for turn_id, data in rows.values_list("turn_id", "data")
    ]


# -- the owner's read-only archive (the chat's "View the archive") ----------------------

ARCHIVE_MESSAGES = 2000


def archived_generations(*, session: m.Session) -> list[dict[str, Any]]:
    """The session's archived generations (what a reset put away: the branch that was live
    then; a branch left for another is no archive), newest first, with when and by whom each
    was reset and how many messages it holds."""
    resets = {r.generation: r for r in m.SessionReset.objects.filter(session=session).select_related("by")}
    if not resets:
        return []
    counts = dict(
        m.Message.objects.filter(session=session, generation__in=list(resets))
        .values("generation")
        .annotate(n=Count("*"))
        .values_list("generation", "n")
    )
    out = []
    for g in sorted(resets, reverse=True):
        reset = resets[g]
        out.append(
            {
                "generation": g,
                "name": f"{session.key}#g{g}",
                "messages": counts.get(g, 0),
                "reset_at": reset.created_at,
                "reset_by": reset.by.get_username() if reset.by else "",
            }
        )
    return out


def has_archive(session: m.Session) -> bool:
    """Whether a reset archived a generation of the session (a branch left is no archive)."""
    return m.SessionReset.objects.filter(session=session).exists()


def branches_of(*, session: m.Session) -> dict[str, Any]:
    """The live branch and its tree (``Branch`` rows), and each message of the live branch that
    a person sent to open a turn: its position, its turn, and the branches a switcher steps
    through there (``branches.alternatives``; one: nothing to switch)."""
    rows = list(m.Branch.objects.filter(session=session).order_by("generation"))
    nodes = [branches.BranchNode(b.generation, b.parent_generation, b.fork_index) for b in rows]
    tree = branches.tree_of(nodes, session.generation)
    opened = list(
        m.Message.objects.filter(session=session, generation=session.generation, role="user")
        .order_by("index")
        .values_list("index", "turn_id")
    )
    openings = dict(m.Turn.objects.filter(pk__in=[t for _, t in opened if t]).values_list("pk", "opening"))
    points = []
    for index, turn_id in opened:
        if turn_id and openings.get(turn_id) == index:
            points.append(
                {
                    "index": index,
                    "turn_id": turn_id,
                    "alternatives": branches.alternatives(nodes, session.generation, index),
                    "current": branches.holder(nodes, session.generation, index),
                }
            )
    return {
        "generation": session.generation,
        "seq": session.event_seq,
        "openings": points,
        "branches": [
            {
                "generation": b.generation,
                "parent": b.parent_generation,
                "fork_index": b.fork_index,
                "created_at": b.created_at.isoformat(),
            }
            for b in rows
            if b.generation in tree
        ],
    }


def transcript(*, session: m.Session, generation: int, limit: int = ARCHIVE_MESSAGES) -> list[dict[str, Any]]:
    """One generation's conversation as the archive page shows it (text only; escaped by the
    template): user and assistant text, tool calls and their results."""
    out = []
    rows = m.Message.objects.filter(session=session, generation=generation).order_by("index")[:limit]
    for row in rows:
        data = row.data or {}
        item = {"role": row.role, "created_at": row.created_at, "text": str(data.get("text") or "")}
        if row.role == "user":
            item["attachments"] = [a for a in data.get("attachments", ()) if isinstance(a, dict)]
        if row.role == "trigger" and data.get("by") == m.NOTE_BY:  # a takeover's, in the chat's words
            item.update(role="takeover", text=m.note_for_people(item["text"]))
        if row.role == "assistant":
            # a person's reply while they had the session (``takeover``): shown with their name
            by = str(data.get("by") or "")
            item["person"] = by[len("person:") :] if by.startswith("person:") else ""
            item["tool_calls"] = [
                {"name": c.get("name"), "input": _compact(c.get("input"))}
                for c in data.get("tool_calls", ())
                if isinstance(c, dict)
            ]
        if row.role == "tool":
            result = data.get("result")
            item.update(
                name=data.get("name") or "",
                result=_compact(result),
                is_error=bool(data.get("is_error")) or (isinstance(result, dict) and "error" in result),
            )
        out.append(item)
    return _with_cancels(out, [r.turn_id for r in rows], session=session, generation=generation)


def _with_cancels(
    out: list[dict[str, Any]], turn_ids: list[Any], *, session: m.Session, generation: int
) -> list[dict[str, Any]]:
    """A cancelled turn's marker after its last message: its reason and the reply text it
    streamed before the cancel (the turn.cancelled event's ``discarded``), which the
    conversation never kept."""
    cancelled = {
        t.pk: t
        for t in m.Turn.objects.filter(session=session, generation=generation, status="cancelled").only(
            "pk", "cancel_reason"
        )
    }
    if not cancelled:
        return out
    discarded = {
        e.turn_id: str((e.data or {}).get("discarded") or "")
        for e in m.Event.objects.filter(
            session=session, generation=generation, type="turn.cancelled", turn_id__in=list(cancelled)
        ).only("turn_id", "data")
    }
    last = {tid: i for i, tid in enumerate(turn_ids) if tid in cancelled}
    marked: list[dict[str, Any]] = []
    for i, item in enumerate(out):
        marked.append(item)
        tid = turn_ids[i]
        if last.get(tid) == i:
            marked.append(
                {
                    "role": "cancelled",
                    "created_at": item["created_at"],
                    "text": discarded.get(tid, ""),
                    "reason": cancelled[tid].cancel_reason or "requested",
                }
            )
    return marked


def _compact(value: Any, limit: int = 2000) -> str:
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_keys(turn_id: str) -> list[str]:
    """The keys of a turn's step memo: its Step rows and the steps folded into the messages it
    wrote (``Message.step``), in no particular order."""
    rows = list(m.Step.objects.filter(turn_id=turn_id).values_list("key", flat=True))
    turn = m.Turn.objects.filter(pk=turn_id).only("session_id", "generation", "opening").first()
    if turn is None:
        return rows
    return rows + list(turn.written().filter(step__isnull=False).values_list("step", flat=True))


# -- what the web layer reads (its views hold no queries of their own) --------------------------------


def turn_in_session(session: m.Session, turn_id: str) -> m.Turn | None:
    """The turn ``turn_id`` of ``session`` (any generation), its session attached; None if none."""
    turn = m.Turn.objects.filter(pk=turn_id, session=session).first()
    if turn is not None:
        turn.session = session
    return turn


def turn_with_session(turn_id: str) -> m.Turn | None:
    return m.Turn.objects.select_related("session").filter(pk=turn_id).first()


def parked_turns_of(session: m.Session) -> list[m.Turn]:
    """The session's turns parked on an answer in its live generation, oldest first."""
    rows = list(
        m.Turn.objects.filter(session=session, status=m.TurnStatus.SUSPENDED, generation=session.generation).order_by(
            "order"
        )
    )
    for turn in rows:
        turn.session = session
    return rows


def last_turn(session: m.Session) -> m.Turn | None:
    """The newest turn of the session's live generation."""
    return m.Turn.objects.filter(session=session, generation=session.generation).order_by("-order").first()


def has_turns(session: m.Session) -> bool:
    return m.Turn.objects.filter(session=session).exists()


def message_at(session: m.Session, index: int) -> m.Message | None:
    """The live generation's message at ``index`` (its index, role and turn id only)."""
    return (
        m.Message.objects.filter(session=session, generation=session.generation, index=index)
        .only("index", "role", "turn_id")
        .first()
    )


def site_state(now: Any) -> dict[str, Any]:
    """The site's figures for a scrape (``web/prometheus.py``): unfinished turns of live
    generations by (agent, status), parked ones by agent, failures and retries in the hour before
    ``now``, today's usage per agent (``pricing.Usage``), webhook deliveries failing."""
    hour_ago = now - dt.timedelta(hours=1)
    live = m.Turn.objects.filter(generation=F("session__generation"))
    unfinished = (m.TurnStatus.QUEUED, m.TurnStatus.RUNNING, m.TurnStatus.SUSPENDED)
    today = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    return {
        "by_status": list(
            live.filter(status__in=unfinished)
            .values_list("session__agent", "status")
            .annotate(n=Count("pk"))
            .order_by()
        ),
        "parked": list(
            live.filter(status=m.TurnStatus.SUSPENDED, waiting=0)
            .values_list("session__agent")
            .annotate(n=Count("pk"))
            .order_by()
        ),
        "failed_hour": m.Event.objects.filter(type="turn.failed", created_at__gte=hour_ago)
        .values("turn_id")
        .distinct()
        .count(),
        "retried_hour": m.Turn.objects.filter(attempts__gt=1, created_at__gte=hour_ago).count(),
        "per_agent": pricing.usage_totals(m.Turn.objects.filter(created_at__gte=today), wiring.agent_model)[1],
        "deliveries_failing": WebhookDelivery.objects.exclude(status=DeliveryStatus.DELIVERED)
        .filter(attempts__gt=0)
        .count(),
    }
