"""What the engine and the site read: a turn's state in O(1) queries, its row, the session's
pending requests, its event log, the head of its chain."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from agents_app.runtime import events as ev
from agents_app.runtime.compaction import transcript_start
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import LoggedEvent, SessionRef, TurnRecord, TurnState, TurnStatus
from sessions_app import models as m
from sessions_app.store import eventlog
from sessions_app.store.lease import CHAIN_BLOCKING
from sessions_app.store.records import loads, record_of, turn_row

TRANSCRIPT_PG = ("SELECT coalesce(json_agg(data ORDER BY \"index\")::text, '[]') FROM sessions_app_message "
                 "WHERE session_id = %s AND generation = %s AND \"index\" >= %s")
TRANSCRIPT = ("SELECT data FROM sessions_app_message WHERE session_id = %s AND generation = %s AND \"index\" >= %s "
              "ORDER BY \"index\"")
STEPS = "SELECT key, data FROM sessions_app_step WHERE turn_id = %s"


def load(turn_id: str) -> TurnState:
    """From the boundary on (the live generation's; or this turn's opening, if it compacted):
    what a turn reads does not grow with the session's age."""
    turn = turn_row(turn_id)
    with connection.cursor() as cur:
        return state_of(cur, turn, json_array=connection.vendor == "postgresql")


def state_of(cur: Any, turn: Any, *, json_array: bool = False) -> TurnState:
    """``load`` once the turn's row (with its ``session``) is read: its steps and transcript on
    ``cur`` (Django's, or the store's own SQLite connection, ``lite``). ``json_array``: the
    transcript comes as one JSON array (PostgreSQL); else as rows of JSON text (SQLite).
    Either way it is decoded once, not once per row."""
    turn_id, s = turn.id, turn.session
    live = turn.generation == s.generation
    boundary, summary = (s.boundary, s.summary_index) if live else (0, None)
    cur.execute(STEPS, [turn_id])
    rows = [(k, loads(d)) for k, d in cur.fetchall()]
    base = transcript_start(boundary, ((k, d) for k, d in rows if k.startswith("compact:")))
    if json_array:
        cur.execute(TRANSCRIPT_PG, [turn.session_id, turn.generation, base])
        transcript = [Message.from_json(d) for d in json.loads(cur.fetchone()[0])]
    else:  # SQLite's JSON text, joined into one array: one decode too
        cur.execute(TRANSCRIPT, [turn.session_id, turn.generation, base])
        transcript = [Message.from_json(d) for d in json.loads(f"[{','.join([row[0] for row in cur.fetchall()])}]")]
    prefix, spawn_prefix = f"input:{turn_id}:", f"spawn:{turn_id}:"
    answers = {k[len(prefix):]: d for k, d in rows if k.startswith(prefix)}
    spawned = {k[len(spawn_prefix):]: d for k, d in rows if k.startswith(spawn_prefix)}
    steps = {k for k, _ in rows if not k.startswith("input:")}
    return TurnState(turn=record_of(turn), transcript=transcript, steps=steps, answers=answers,
                     base=base, boundary=boundary, summary=summary, spawned=spawned)


def get_turn(turn_id: str) -> TurnRecord:
    return record_of(turn_row(turn_id))


def pending(session: SessionRef) -> list[dict]:
    s = m.Session.objects.filter(agent=session.agent, key=session.key).first()
    if s is None:
        return []
    return [
        {"turn_id": t.id, **(t.pending or {})}
        for t in m.Turn.objects.filter(session=s, status=TurnStatus.SUSPENDED, generation=s.generation, waiting=0)
    ]


def events(session: SessionRef, after: int = 0, limit: int = 1000) -> list[LoggedEvent]:
    s = m.Session.objects.filter(agent=session.agent, key=session.key).first()
    if s is None:
        return []
    rows = list(m.Event.objects.filter(session=s, generation=s.generation, seq__gt=after).order_by("seq")
                .values_list("seq", "data")[:limit])
    whole = eventlog.restore((s.pk, s.generation, data) for _, data in rows)
    return [LoggedEvent(seq, ev.event_from_json(data)) for (seq, _), data in zip(rows, whole)]


#: the head of a session's chain: the first turn that blocks the ones after it
NEXT_QUEUED = ("SELECT t.id, t.status FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id "
               f"WHERE s.agent = %s AND s.key = %s AND t.status IN ({', '.join(['%s'] * len(CHAIN_BLOCKING))}) "
               'ORDER BY t."order" LIMIT 1')


def next_queued(session: SessionRef, cur: Any = None) -> str | None:
    """The head of the session's chain if it is queued (on ``cur``, else Django's connection)."""
    if cur is None:
        with connection.cursor() as cur:
            return next_queued(session, cur)
    cur.execute(NEXT_QUEUED, [session.agent, session.key, *CHAIN_BLOCKING])
    first = cur.fetchone()
    return first[0] if first and first[1] == TurnStatus.QUEUED else None
