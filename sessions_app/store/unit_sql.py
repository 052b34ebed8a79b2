"""The statements of a checkpoint's unit on PostgreSQL (``checkpoint_pg`` sends them, one
``wire.Batch`` a unit), each made once per shape: the unit's opening statement (the session's
row, the fence, the step guard, the first messages and events: ``unit_statement``), the event
numbering with the session's status, more messages and events, the chain's head.

Two forms of most: one that finds the turn's session and generation from the turn's row, and
one for a unit whose turn's session this process knows (``transcripts.facts``: its claim read
them, and they never change), which takes them as parameters and reads no turn row for them."""

from __future__ import annotations

import functools

from sessions_app import models
from sessions_app.store import wire
from sessions_app.store.checkpoint import (
    IN_CHAIN,
    LOCKED_SESSION,
    NEXT_IN_CHAIN,
    session_status_sql,
)

SESSION_STATUS_BY_TURN = wire.numbered(session_status_sql(by_turn=True))
SESSION_STATUS_BY_ID = wire.numbered(session_status_sql(by_turn=False))
STATUS_AND_EVENT_SEQ_SQL = session_status_sql(by_turn=True, events=True)
STATUS_AND_EVENT_SEQ_BY_ID = session_status_sql(by_turn=False, events=True)
INSERT_STEP = wire.numbered(
    "INSERT INTO sessions_app_step (turn_id, key, message_index, data, created_at) "
    "SELECT t.id, %s::text, %s::integer, %s::jsonb, %s::timestamptz FROM sessions_app_turn t WHERE t.id = %s::text"
)
#: a unit's events numbered: the session's ``event_seq`` moved past them (parameters: how many,
#: the turn), answering the new ``event_seq`` and the session's generation
BUMP_EVENT_SEQ_SQL = (
    "UPDATE sessions_app_session SET event_seq = event_seq + %s::integer "
    "WHERE id = (SELECT session_id FROM sessions_app_turn t WHERE t.id = %s::text) "
    "RETURNING event_seq, generation"
)
#: ``BUMP_EVENT_SEQ_SQL`` for a unit whose turn's session this process knows (``transcripts.facts``:
#: a turn's session and generation never change): by the session's key, reading no turn row
#: (parameters: how many, the session)
BUMP_EVENT_SEQ_BY_ID = (
    "UPDATE sessions_app_session SET event_seq = event_seq + %s::integer WHERE id = %s::bigint "
    "RETURNING event_seq, generation"
)
#: ``NEXT_IN_CHAIN`` by the session's key (parameter: the session)
NEXT_IN_CHAIN_OF_SESSION = (
    "SELECT n.id, n.status, s.agent, s.key FROM sessions_app_turn n JOIN sessions_app_session s ON s.id = n.session_id "
    f'WHERE n.session_id = %s::bigint AND n.status {IN_CHAIN} ORDER BY n."order" LIMIT 1'
)
#: at most this many rows in one of a unit's multi-row inserts (``insert_messages_sql``,
#: ``insert_events_sql``): each row count is a prepared statement of its own; more rows take
#: more statements
ROWS_PER_INSERT = 8


@functools.lru_cache(maxsize=2 * ROWS_PER_INSERT)
def insert_messages_sql(count: int, known: bool = False) -> bytes:
    """``count`` messages of a unit in one statement, each reading its session and generation
    from the turn's row: the ones past the first ``ROWS_PER_INSERT`` (``unit_statement`` inserts
    those, after the step guard). Parameters: the time, each message's position, role, JSON and
    step key, and the turn.

    ``known``: the process knows the turn's session and generation (``transcripts.facts``), which
    the statement then takes as parameters, with the turn's stored reference (``known_ref``),
    reading no turn row for them: the session, the generation, the turn's reference and the
    time, then each message's four (no turn at the end)."""
    rows = ", ".join(["(%s::integer, %s::text, %s::json, %s::text)"] * count)
    columns = (
        'INSERT INTO sessions_app_message (session_id, generation, "index", turn_id, role, data, step, created_at) '
    )
    if known:
        return wire.numbered(
            f"{columns}SELECT %s::bigint, %s::integer, v.i, %s::bytea, v.role, v.data, v.step, %s::timestamptz "
            f"FROM (VALUES {rows}) AS v(i, role, data, step)"
        )
    return wire.numbered(
        f"{columns}SELECT t.session_id, t.generation, v.i, june_tid(t.id), v.role, v.data, v.step, %s::timestamptz "
        f"FROM sessions_app_turn t CROSS JOIN (VALUES {rows}) AS v(i, role, data, step) WHERE t.id = %s::text"
    )


@functools.lru_cache(maxsize=4096)  # every unit of a turn binds its turn's
def known_ref(turn_id: str) -> str:
    """A turn id as a ``%s::bytea`` parameter binds it to a ``turn_id`` column (``models.turn_ref``,
    in bytea's hex text): what ``june_tid`` computes in the server, per row, with a regular
    expression."""
    return "\\x" + models.turn_ref(turn_id).hex()


def _events_from(count: int, source: str) -> str:
    """The INSERT of ``count`` events numbered by ``s.event_seq`` (``source`` names the turn
    ``t`` and the session's numbering ``s``). Parameters: the unit's number of events, this
    statement's first event's place among them (from 0), each event's turn, type code, JSON and
    time, then the unit's turn."""
    rows = ", ".join(f"({n}, %s::text, %s::smallint, %s::json, %s::timestamptz)" for n in range(1, count + 1))
    return (
        "INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at) "
        "SELECT t.session_id, t.generation, s.event_seq - %s::integer + %s::integer + e.n, june_tid(e.tid), "
        f"e.type, e.data, e.at FROM {source} CROSS JOIN (VALUES {rows}) AS e(n, tid, type, data, at) "
        "WHERE t.id = %s::text"
    )


def _events_known(count: int) -> str:
    """``_events_from`` for a unit whose turn's session and generation this process knows: they
    are parameters, each event's turn its stored reference (``known_ref``), numbered by
    ``numbering s``. Parameters: the session, the generation, the unit's number of events, this
    statement's first event's place among them, each event's turn reference, type code, JSON
    and time."""
    rows = ", ".join(f"({n}, %s::bytea, %s::smallint, %s::json, %s::timestamptz)" for n in range(1, count + 1))
    return (
        "INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at) "
        "SELECT %s::bigint, %s::integer, s.event_seq - %s::integer + %s::integer + e.n, e.tid, e.type, e.data, e.at "
        f"FROM numbering s CROSS JOIN (VALUES {rows}) AS e(n, tid, type, data, at)"
    )


@functools.lru_cache(maxsize=ROWS_PER_INSERT)
def insert_events_sql(count: int) -> bytes:
    """``count`` events of a unit in one statement (``_events_from``'s parameters), numbered by
    the session's ``event_seq`` that an earlier statement of the unit moved past all of them: the
    ones past the first ``ROWS_PER_INSERT`` (``numbered_events_sql`` inserts those)."""
    return wire.numbered(_events_from(count, "sessions_app_turn t JOIN sessions_app_session s ON s.id = t.session_id"))


@functools.lru_cache(maxsize=8 * ROWS_PER_INSERT)
def numbered_events_sql(numbering: str, count: int, chain: bool = False, known: bool = False) -> bytes:
    """``numbering`` (``BUMP_EVENT_SEQ_SQL``, ``STATUS_AND_EVENT_SEQ_SQL``: the session's row
    updated, its ``event_seq`` moved past the unit's events, answering the new ``event_seq`` and
    generation) and the insert of the unit's first ``count`` events, in one statement that
    answers what ``numbering`` does; with ``chain``, also the head of the session's chain
    (``NEXT_IN_CHAIN``'s four columns, NULL when there is none), as a settling unit reads it
    after its fence. Parameters: ``numbering``'s, ``_events_from``'s, then (``chain``) the turn.
    ``known``: the session's key instead of the turn (``BUMP_EVENT_SEQ_BY_ID``,
    ``STATUS_AND_EVENT_SEQ_BY_ID``, ``_events_known``; the chain's head by the session too)."""
    head = ""
    columns = ""
    if chain:
        head = f" LEFT JOIN LATERAL ({NEXT_IN_CHAIN_OF_SESSION if known else NEXT_IN_CHAIN}) n ON true"
        columns = ", n.id, n.status, n.agent, n.key"
    events = _events_known(count) if known else _events_from(count, "numbering s CROSS JOIN sessions_app_turn t")
    return wire.numbered(
        f"WITH numbering AS ({numbering}), e AS ({events}) "
        f"SELECT numbering.event_seq, numbering.generation{columns} FROM numbering{head}"
    )


MOVE_BOUNDARY = wire.numbered(
    "UPDATE sessions_app_session SET boundary = %s::integer, summary_index = %s::integer "
    "FROM sessions_app_turn t WHERE t.id = %s::text AND sessions_app_session.id = t.session_id "
    "AND sessions_app_session.generation = t.generation"
)
NEXT_IN_CHAIN_PG = wire.numbered(NEXT_IN_CHAIN)
ASYNC_COMMIT = b"SELECT set_config('synchronous_commit', 'off', true)"
#: the store's lock order (sessions_app.store): the session row before its turn's, as the host
#: operations take them: a claim's statement opens with it (``opening.CLAIM_LOCKED``; sent on its
#: own before ``opening.CLAIM`` when that claimed nothing), a unit's that numbers no events too
#: (``unit_statement``)
LOCK_SESSION = wire.numbered(LOCKED_SESSION["turn"])


#: how a unit's statement (``unit_statement``) takes its session's row first (the store's lock
#: order): the numbering of its events (an UPDATE of that row; parameters: how many, then the
#: session's key or the turn), or a lock of its own (parameter: the session's key or the turn)
HEADS = {
    "number session": ("numbering", f"numbering AS ({BUMP_EVENT_SEQ_BY_ID})"),
    "number turn": ("numbering", f"numbering AS ({BUMP_EVENT_SEQ_SQL})"),
    "lock session": ("l", f"l AS MATERIALIZED ({LOCKED_SESSION['session']})"),
    "lock turn": ("l", f"l AS MATERIALIZED ({LOCKED_SESSION['turn']})"),
}


@functools.lru_cache(maxsize=128)
def unit_statement(fence: str, head: str, messages: int = 0, guarded: int = 0, events: int = 0) -> bytes:
    """A unit's opening statements as ONE: the session's row (``HEADS``), the fence (``fence``:
    ``checkpoint.fence_sql``'s UPDATE), the step guard, the unit's first ``messages`` messages
    and (with a numbering head) its first ``events`` events. It answers the fence's
    (cancel_reason, session_id, generation), then (numbering) the new ``event_seq`` and the
    session's generation; or raises.

    PostgreSQL runs a statement's data-modifying parts in no promised order, so each part
    depends on the one it must follow: the fence's update filters on the head's row (an
    uncorrelated EXISTS: read once, before the turn's row is scanned, so the session's row is
    locked first and a fence waiting for it holds no lock of the turn's), and the guard and the
    inserts read the fence's RETURNING row. A fenced attempt's fence returns none: the guard
    reads nothing (no JUNE3), nothing is inserted, and the answer raises JUNE1
    (``june_lease_lost``). A turn that holds one of the ``guarded`` steps already raises JUNE3
    (``june_step_recorded``, materialized: computed whatever the planner makes of the NOT
    EXISTS) and the statement, inserts and all, rolls back. The guard reads the turn's opening
    as the fence left it, and its messages in the statement's snapshot: one taken before the
    session's lock, which misses only a unit that committed meanwhile, and a unit of this turn
    that passes its fence then is of the same attempt, whose units run one after the other (an
    older attempt's committed before the claim that ended it, which committed before this one).

    Parameters: the head's, the fence's; with a guard, the turn's stored reference (``known_ref``)
    and the ``guarded`` keys; with messages, the turn's reference, the time and each message's
    position, role, JSON and step key; with events, how many the unit numbers and each event's
    turn reference, type code, JSON and time; then the turn and the attempt (the raise's)."""
    name, cte = HEADS[head]
    parts = [cte, f"f AS ({fence} AND EXISTS (SELECT 1 FROM {name}) RETURNING {FENCED})"]
    if guarded:
        steps = ", ".join(["%s::text"] * guarded)
        parts.append(
            "g AS MATERIALIZED (SELECT june_step_recorded(f.id, m.step) FROM f JOIN sessions_app_message m "
            'ON m.session_id = f.session_id AND m.generation = f.generation AND m."index" >= f.opening '
            f"WHERE m.turn_id = %s::bytea AND m.step IN ({steps}) LIMIT 1)"
        )
    if messages:
        rows = ", ".join(["(%s::integer, %s::text, %s::json, %s::text)"] * messages)
        parts.append(
            'i AS (INSERT INTO sessions_app_message (session_id, generation, "index", turn_id, role, data, step, '
            "created_at) SELECT f.session_id, f.generation, v.i, %s::bytea, v.role, v.data, v.step, %s::timestamptz "
            f"FROM f CROSS JOIN (VALUES {rows}) AS v(i, role, data, step)"
            + (" WHERE NOT EXISTS (SELECT 1 FROM g))" if guarded else ")")
        )
    numbering = name == "numbering"
    if events:
        assert numbering, head
        rows = ", ".join(f"({n}, %s::bytea, %s::smallint, %s::json, %s::timestamptz)" for n in range(1, events + 1))
        parts.append(
            "e AS (INSERT INTO sessions_app_event (session_id, generation, seq, turn_id, type, data, created_at) "
            "SELECT f.session_id, f.generation, s.event_seq - %s::integer + e.n, e.tid, e.type, e.data, e.at "
            f"FROM numbering s CROSS JOIN f CROSS JOIN (VALUES {rows}) AS e(n, tid, type, data, at))"
        )
    return wire.numbered(
        f"WITH {', '.join(parts)} SELECT f.cancel_reason, f.session_id, f.generation, "
        "CASE WHEN f.session_id IS NULL THEN june_lease_lost(%s::text, %s::text) END"
        + (", s.event_seq, s.generation" if numbering else "")
        + " FROM (SELECT 1) AS one LEFT JOIN f ON true"
        + (" LEFT JOIN numbering s ON true" if numbering else "")
    )


#: what a unit's fence answers inside ``unit_statement`` (its guard and inserts read them)
FENCED = "id, cancel_reason, session_id, generation, opening"
