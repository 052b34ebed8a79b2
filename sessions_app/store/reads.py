"""What the engine and the site read: a turn's state in O(1) queries, its row, the session's
pending requests, its event log, the head of its chain."""

from __future__ import annotations

from typing import Any

from django.db import connection

from agents_app.runtime import events as ev
from agents_app.runtime.compaction import transcript_start
from agents_app.runtime.messages import Message
from agents_app.runtime.seams import LoggedEvent, SessionRef, TurnRecord, TurnState, TurnStatus
from sessions_app import models as m
from sessions_app.store import eventlog, jsontext, transcripts
from sessions_app.store.lease import IN_CHAIN
from sessions_app.store.rows import loads, record_of, turn_row

#: a message's whole JSON: its row's JSON with the role and turn id its columns hold
#: (``checkpoint.row_json``; a row written whole keeps its own)
WHOLE_PG = "jsonb_build_object('role', {0}role, 'turn_id', june_tid_text({0}turn_id)) || {0}data::jsonb"
WHOLE = "json_insert(data, '$.role', role, '$.turn_id', turn_id)"
TRANSCRIPT_PG = (
    f"SELECT coalesce(json_agg({WHOLE_PG.format('')} ORDER BY \"index\")::text, '[]') "
    'FROM sessions_app_message WHERE session_id = %s AND generation = %s AND "index" >= %s'
)
TRANSCRIPT = (
    f"SELECT {WHOLE} FROM sessions_app_message WHERE session_id = %s AND generation = %s "
    'AND "index" >= %s ORDER BY "index"'
)
#: the steps folded into the messages a turn ``t`` wrote: its messages from its opening on, by
#: the message table's key ({ref}: how a row's ``turn_id`` holds ``t.id``, ``models.TurnRefField``)
FOLDED = (
    "SELECT m.step, {null} FROM sessions_app_message m WHERE m.session_id = t.session_id "
    'AND m.generation = t.generation AND m."index" >= t.opening AND m.turn_id = {ref} AND m.step IS NOT NULL'
)
#: a turn's steps: its Step rows, and the steps folded into the messages it wrote (``FOLDED``, as a join)
STEPS, STEPS_PG = (
    "SELECT key, data FROM sessions_app_step WHERE turn_id = %s UNION ALL SELECT m.step, NULL "
    "FROM sessions_app_turn t JOIN sessions_app_message m ON m.session_id = t.session_id "
    f'AND m.generation = t.generation AND m."index" >= t.opening WHERE t.id = %s AND m.turn_id = {ref} '
    "AND m.step IS NOT NULL"
    for ref in ("t.id", "june_tid(t.id)")
)
#: a claim's reads (``opening.CLAIM``, in the claim's own statement, of the turn ``t`` it claimed and
#: its session ``s``): its steps (one JSON array: its Step rows, and the steps folded into the
#: messages it wrote), where its transcript is read from, and the transcript from there (one JSON
#: array). It is read from the live boundary (``live_boundary``), or past the end of what this
#: process already holds (``transcripts``: session id, generation, start, end) when that stretch
#: is of the turn's session and generation and covers the boundary. ``LOAD_COLUMNS`` takes no
#: parameter; ``LOAD_FROM`` (joined after ``t`` and ``s``) the stretch's five
LOAD_COLUMNS = (
    "(SELECT coalesce(json_agg(json_build_array(st.key, st.data))::text, '[]') FROM "
    "(SELECT key, data FROM sessions_app_step WHERE turn_id = t.id UNION ALL "
    f"{FOLDED.format(null='NULL::jsonb', ref='june_tid(t.id)')}) st), f.pos, "
    f"(SELECT coalesce(json_agg({WHOLE_PG.format('mm.')} ORDER BY mm.\"index\")::text, '[]') "
    "FROM sessions_app_message mm WHERE mm.session_id = t.session_id AND mm.generation = t.generation "
    'AND mm."index" >= f.pos)'
)
LOAD_FROM = (
    "CROSS JOIN LATERAL (SELECT CASE WHEN t.generation = s.generation THEN s.boundary ELSE 0 END AS start) b "
    "CROSS JOIN LATERAL (SELECT CASE WHEN t.session_id = %s::bigint AND t.generation = %s::integer "
    "AND b.start BETWEEN %s::integer AND %s::integer THEN %s::integer ELSE b.start END AS pos) f"
)


def load(turn_id: str) -> TurnState:
    """From the boundary on (the live generation's; or this turn's opening, if it compacted):
    what a turn reads does not grow with the session's age."""
    turn = turn_row(turn_id)
    with connection.cursor() as cur:
        return load_on(cur, turn, json_array=connection.vendor == "postgresql")


def load_on(cur: Any, turn: Any, *, json_array: bool = False, held: bool = False) -> TurnState:
    """``load`` once the turn's row (with its ``session``) is read: its steps and transcript on
    ``cur`` (Django's, or the store's own SQLite connection, ``lite``). ``json_array``: the
    transcript comes as one JSON array (PostgreSQL); else as rows of JSON text (SQLite).
    Either way it is decoded once, not once per row. ``held``: ``cur`` reads committed rows
    only (``lite``: its own connection, no transaction of a caller's): the transcript this
    process holds for the session (``transcripts``) is not read again, only what follows it,
    and what was read is held from then on."""
    s = turn.session
    boundary, summary = live_boundary(turn.generation, s.generation, s.boundary, s.summary_index)
    cur.execute(STEPS_PG if json_array else STEPS, [turn.id, turn.id])
    rows = [(k, loads(d)) for k, d in cur.fetchall()]
    base = transcript_start(boundary, ((k, d) for k, d in rows if k.startswith("compact:")))
    if held and not json_array:
        key = (turn.session_id, turn.generation)
        end, known = transcripts.since(key, base)
        cur.execute(TRANSCRIPT, [*key, end])
        unseen = messages_of(f"[{','.join([row[0] for row in cur.fetchall()])}]")
        transcripts.read(key, end, unseen)
        known.extend(unseen)
        transcript = known
    elif json_array:
        cur.execute(TRANSCRIPT_PG, [turn.session_id, turn.generation, base])
        transcript = messages_of(cur.fetchone()[0])
    else:  # SQLite's JSON text, joined into one array: one decode too
        cur.execute(TRANSCRIPT, [turn.session_id, turn.generation, base])
        transcript = messages_of(f"[{','.join([row[0] for row in cur.fetchall()])}]")
    return state_of(record_of(turn), rows, transcript, base=base, boundary=boundary, summary=summary)


def live_boundary(generation: int, live: int, boundary: int, summary: int | None) -> tuple[int, int | None]:
    """(boundary, summary index) a turn of ``generation`` reads from: the session's, for the live
    generation; an archived generation's turn reads its whole transcript."""
    return (boundary, summary) if generation == live else (0, None)


def messages_of(array: str) -> list[Message]:
    """A transcript sent as one JSON array."""
    return [Message.from_json(d) for d in jsontext.loads(array)]


def state_of(
    rec: TurnRecord,
    rows: list[tuple[str, Any]],
    transcript: list[Message],
    *,
    base: int,
    boundary: int,
    summary: int | None,
) -> TurnState:
    """The TurnState from the turn's record, its step rows (key, data) and its transcript."""
    turn_id = rec.turn_id
    prefix, spawn_prefix = f"input:{turn_id}:", f"spawn:{turn_id}:"
    answers = {k[len(prefix) :]: d for k, d in rows if k.startswith(prefix)}
    spawned = {k[len(spawn_prefix) :]: d for k, d in rows if k.startswith(spawn_prefix)}
    steps = {k for k, _ in rows if not k.startswith("input:")}
    return TurnState(
        turn=rec,
        transcript=transcript,
        steps=steps,
        answers=answers,
        base=base,
        boundary=boundary,
        summary=summary,
        spawned=spawned,
    )


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
    rows = list(
        eventlog.timed(m.Event.objects.filter(session=s, generation=s.generation, seq__gt=after))
        .order_by("seq")
        .values_list("seq", "type", "turn_id", "data", "at")[:limit]
    )
    whole = eventlog.restore((s.pk, s.generation, type_, turn_id, data) for _, type_, turn_id, data, _ in rows)
    return [
        LoggedEvent(row[0], ev.event_from_json(data), None if row[4] is None else row[4].isoformat())
        for row, data in zip(rows, whole)
    ]


#: the head of a session's chain: the first turn that blocks the ones after it
NEXT_QUEUED = (
    "SELECT t.id, t.status FROM sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id "
    f"WHERE s.agent = %s AND s.key = %s AND t.status {IN_CHAIN} "
    'ORDER BY t."order" LIMIT 1'
)


def next_queued(session: SessionRef, cur: Any = None) -> str | None:
    """The head of the session's chain if it is queued (on ``cur``, else Django's connection)."""
    if cur is None:
        with connection.cursor() as cur:
            return next_queued(session, cur)
    cur.execute(NEXT_QUEUED, [session.agent, session.key])
    first = cur.fetchone()
    return first[0] if first and first[1] == TurnStatus.QUEUED else None
