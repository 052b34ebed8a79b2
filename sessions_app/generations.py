"""Staff reads of a session's generations and event log (the admin's archive, turn and tree
pages show them): a page of generations with their counts, one generation's transcript, steps
and events a page at a time (each page a constant number of queries, whatever the size of the
session), and events with their commit times and their payloads as written (the store keeps an
event that repeats a message as a reference to it: ``store/eventlog.py`` puts it back)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, F, JSONField, QuerySet, Value

from sessions_app import models as m
from sessions_app.store import eventlog

MESSAGES_PER_PAGE = 100
EVENTS_PER_PAGE = 200
STEPS_PER_PAGE = 200
GENERATIONS_PER_PAGE = 50
#: the turns of a generation its page lists
TURNS_SHOWN = 500
#: the events that end a turn
ENDED = ("turn.completed", "turn.failed", "turn.cancelled")


def timed(events: QuerySet) -> QuerySet:
    """``events`` (Event rows) with ``at``: when each was committed."""
    return eventlog.timed(events)


def payloads(session_id: Any, generation: int, events: Any) -> list[dict[str, Any]]:
    """The payloads of ``events`` (Event rows of one generation, read with ``data``) as the
    engine wrote them."""
    return eventlog.restore((session_id, generation, e.type, e.turn_id, e.data) for e in events)


def turn_events(turn: m.Turn) -> tuple[list[Any], list[dict[str, Any]]]:
    """The turn's events in order (with ``at``) and their payloads."""
    events = list(timed(turn.logged().order_by("seq").only("seq", "type", "turn_id", "data", "created_at")))
    return events, payloads(turn.session_id, turn.generation, events)


def ended_at(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """When each of ``rows``' turns (``id``, ``session_id``) ended: its ending event's commit
    time (one query)."""
    if not rows:
        return {}
    events = timed(
        m.Event.objects.filter(
            session_id__in={r["session_id"] for r in rows}, turn_id__in=[r["id"] for r in rows], type__in=ENDED
        )
    )
    return {e.turn_id: e.at for e in events}


def generation_counts(session: m.Session, page_number: Any) -> tuple[Page, dict[str, Any]]:
    """A page of the session's generation numbers (the reset archives and the branches), newest
    first, and for those: who reset each (``resets``), where each branch forked (``forks``), and
    how many messages, events and turns each holds."""
    generations = list(range(max(session.generation_seq, session.generation), -1, -1))
    page = Paginator(generations, GENERATIONS_PER_PAGE).get_page(page_number)
    shown = list(page.object_list)

    def counts(model: Any) -> dict[int, int]:
        rows = model.objects.filter(session=session, generation__in=shown).values("generation").annotate(n=Count("*"))
        return {r["generation"]: r["n"] for r in rows}

    return page, {
        "resets": {
            r.generation: r
            for r in m.SessionReset.objects.filter(session=session, generation__in=shown).select_related("by")
        },
        "forks": {
            b.generation: b
            for b in m.Branch.objects.filter(session=session, generation__in=shown, parent_generation__isnull=False)
        },
        "messages": counts(m.Message),
        "events": counts(m.Event),
        "turns": counts(m.Turn),
    }


def message_page(at: Any) -> int:
    """The transcript page that holds message ``?at=<index>`` (a search hit; a message's position
    is its index)."""
    return int(at) // MESSAGES_PER_PAGE + 1 if isinstance(at, str) and at.isdigit() and len(at) < 10 else 1


def generation_pages(session: m.Session, generation: int, params: Any) -> dict[str, Any]:
    """One generation: a page of its transcript (``page``, or the one holding ``at``), of its
    events (``events``, each with ``at``; ``event_data``: their payloads) and of its steps
    (``steps``: key, turn id, message index, data, time), its turns, and where its summaries'
    kept parts start (``boundaries``: position -> summaries)."""
    messages = Paginator(
        m.Message.objects.filter(session=session, generation=generation)
        .order_by("index")
        .only("index", "role", "turn_id", "data", "created_at"),
        MESSAGES_PER_PAGE,
    ).get_page(params.get("page") or message_page(params.get("at")))
    events = Paginator(
        timed(
            m.Event.objects.filter(session=session, generation=generation)
            .order_by("seq")
            .only("seq", "type", "turn_id", "data", "created_at")
        ),
        EVENTS_PER_PAGE,
    ).get_page(params.get("events"))
    # the step memo: Step rows, and the steps folded into the messages (``Message.step``)
    step_fields = ("key", "turn_id", "message_index", "data", "created_at")
    folded = (
        m.Message.objects.filter(session=session, generation=generation, step__isnull=False)
        .annotate(
            key=F("step"),
            turn=m.TurnRefText("turn_id"),
            message_index=F("index"),
            no_data=Value(None, output_field=JSONField()),
        )
        .values_list("key", "turn", "message_index", "no_data", "created_at")
        .order_by()
    )
    steps = Paginator(
        m.Step.objects.filter(turn__session=session, turn__generation=generation)
        .values_list(*step_fields)
        .order_by()
        .union(folded, all=True)
        .order_by("created_at", "message_index"),
        STEPS_PER_PAGE,
    ).get_page(params.get("steps"))
    turns = list(
        m.Turn.objects.filter(session=session, generation=generation)
        .order_by("order")
        .only("id", "order", "status", "kind", "cancel_reason", "attempts", "phase", "input", "created_at")[
            :TURNS_SHOWN
        ]
    )
    boundaries: dict[int, list[int]] = {}
    for index, data in m.Message.objects.filter(session=session, generation=generation, role="summary").values_list(
        "index", "data"
    ):
        boundaries.setdefault(int((data or {}).get("boundary", 0)), []).append(index)
    return {
        "messages": messages,
        "events": events,
        "event_data": payloads(session.pk, generation, events.object_list),
        "steps": steps,
        "turns": turns,
        "boundaries": boundaries,
    }
