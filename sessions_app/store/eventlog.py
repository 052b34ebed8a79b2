"""The durable event log keeps no second copy of what the transcript holds.

An event that repeats the payload of a message written in the same checkpoint (the opening
text of ``turn.started``, the reply of ``message.completed`` and of ``turn.completed``, the
call of ``action.requested``, the result of ``action.completed``, the summary of
``compaction.completed``) is stored with that payload replaced by the message's position
(``"$from": <index>``). Both rows commit in the same transaction and are archived and
deleted together, so the reference always resolves. ``restore`` puts the payloads back when the
log is read (replay over websockets and SSE, the staff archive), with one query for all the
messages a page of events refers to. Live events are published from memory, whole.

A model's reply or a tool's result is then stored once, which is what keeps the storage per
message close to the message's own size (bench/bench_engine.py).

Nor does a row repeat what its columns or its message hold: the ``type`` and ``turn_id`` are
columns (the JSON keeps ``turn_id`` only when it differs from the column), and an event that
refers to a message leaves out what ``restore`` reads back from it (``message.completed``'s
``index`` is its ``$from``; ``action.completed``'s ``call_id`` and ``name`` are its tool
message's, a null ``error`` is left out; ``action.requested`` names its call (``"$call"``)
only when its message made more than one). Rows written before keep those keys: the stored
JSON wins over what ``restore`` fills in.

Nor does such a row keep its own time: it commits with its message, whose ``created_at`` is
the checkpoint's time as its own would be (``timed`` reads it back).

The JSON is kept as its text on PostgreSQL (``models.TextJSONField``): an event that refers to
a message keeps little more than its reference, ``{"$from":2}``, 12 bytes as text and 37 as
jsonb. One that keeps nothing else is stored as the bare position, ``2`` (an event's JSON is
otherwise always an object): on PostgreSQL that makes the row 8 bytes shorter (its alignment),
and most events are such rows. Rows written before keep ``{"$from":2}``; both read the same.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

from django.db.models import Func, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from agents_app.runtime import events as ev
from agents_app.runtime.messages import Message, Role
from sessions_app.models import Message as MessageRow

FROM = "$from"
CALL = "$call"


def _text(message: Message) -> Any:
    return message.text


def _call(message: Message, call_id: str | None) -> Any:
    return next((c.to_json() for c in message.tool_calls if c.id == call_id), None)


def _source(e: ev.TurnEvent, unit: list[tuple[int, Message]]) -> tuple[int, str] | None:
    """(index of the unit's message that holds the event's payload, the payload's field)."""
    if isinstance(e, ev.MessageCompleted):
        found = [i for i, m in unit if i == e.index and m.role == Role.ASSISTANT and m.text == e.text]
        field = "text"
    elif isinstance(e, ev.TurnStarted):
        found = [i for i, m in unit if m.role in (Role.USER, Role.TRIGGER) and m.text == e.text]
        field = "text"
    elif isinstance(e, ev.ActionCompleted):
        found = [i for i, m in unit if m.role == Role.TOOL and m.call_id == e.call_id and m.result == e.result]
        field = "result"
    elif isinstance(e, ev.TurnCompleted):  # the turn's last reply, when its unit wrote it
        found = [i for i, m in unit if m.role == Role.ASSISTANT and m.text == e.text and e.text]
        field = "text"
    elif isinstance(e, ev.CompactionCompleted):
        found = [i for i, m in unit if i == e.index and m.role == Role.SUMMARY and m.text == e.summary]
        field = "summary"
    elif isinstance(e, ev.ActionRequested):
        call_id = e.call.get("id")
        found = [i for i, m in unit if m.role == Role.ASSISTANT and _call(m, call_id) == e.call]
        field = "call"
    else:
        return None
    return (found[0], field) if found else None


def stored(e: ev.TurnEvent, unit: list[tuple[int, Message]], turn_id: str | None) -> dict[str, Any] | int:
    """The JSON an event row keeps, whose ``type`` and ``turn_id`` columns are ``e.type`` and
    ``turn_id``: the event's, less those columns, its repeated payload replaced by a reference
    and what ``restore`` reads back from that message left out; a bare reference as the
    message's position alone."""
    data = e.to_json()
    del data["type"]
    if data.get("turn_id") == turn_id:
        del data["turn_id"]
    source = _source(e, unit) if unit else None
    if source is None:
        return data
    index, field = source
    message = next(m for i, m in unit if i == index)
    if field == "call" and len(message.tool_calls) > 1:
        data[CALL] = data["call"].get("id")
    del data[field]
    data[FROM] = index
    if isinstance(e, ev.MessageCompleted):  # _source matched e.index == index
        del data["index"]
    elif isinstance(e, ev.ActionCompleted):  # _source matched the tool message's call id
        del data["call_id"]
        if e.name == message.name:
            del data["name"]
        if e.error is None:
            del data["error"]
    elif isinstance(e, ev.TurnStarted) and e.attachments and tuple(message.attachments) == tuple(e.attachments):
        del data["attachments"]  # the opening message holds them (``_COPIED``)
    return index if len(data) == 1 else data


_RESTORE: dict[str, tuple[str, Callable[[dict[str, Any], dict[str, Any]], Any]]] = {
    "turn.started": ("text", lambda msg, data: msg.get("text", "")),
    "message.completed": ("text", lambda msg, data: msg.get("text", "")),
    "turn.completed": ("text", lambda msg, data: msg.get("text", "")),
    "action.completed": ("result", lambda msg, data: msg.get("result")),
    "compaction.completed": ("summary", lambda msg, data: msg.get("text", "")),
    "action.requested": ("call", lambda msg, data: _made(msg.get("tool_calls") or [], data)),
}


def _made(calls: list[dict[str, Any]], data: dict[str, Any]) -> dict[str, Any]:
    """The call an ``action.requested`` refers to: the one its ``"$call"`` names, else its
    message's only one."""
    if CALL not in data:
        return calls[0] if len(calls) == 1 else {}
    return next((c for c in calls if c.get("id") == data[CALL]), {})


#: what ``stored`` leaves out of an event that refers to a message: (key, its value from the
#: message and the reference)
_DERIVED: dict[str, tuple[tuple[str, Callable[[dict[str, Any], int], Any]], ...]] = {
    "message.completed": (("index", lambda msg, index: index),),
    "action.completed": (
        ("call_id", lambda msg, index: msg.get("call_id", "")),
        ("name", lambda msg, index: msg.get("name", "")),
        ("error", lambda msg, index: None),
    ),
}

#: what ``stored`` leaves out only when the message holds it, and ``restore`` copies back only
#: then: ``turn.started``'s attachments (most openings have none: no empty key comes back)
_COPIED: dict[str, str] = {"turn.started": "attachments"}

Row = tuple[int, int, str, str | None, dict[str, Any] | int]


def restore(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Whole event JSON for ``(session_id, generation, type, turn_id, stored data)`` rows (the
    row's columns and its data), in their order."""
    whole: list[tuple[int, int, str, str | None, dict[str, Any]]] = [
        (s, g, t, turn, data if isinstance(data, dict) else {FROM: data}) for s, g, t, turn, data in rows
    ]
    wanted: dict[tuple[int, int], set[int]] = defaultdict(set)
    for session_id, generation, _, _, data in whole:
        if FROM in data:
            wanted[(session_id, generation)].add(data[FROM])
    messages: dict[tuple[int, int, int], dict[str, Any]] = {}
    for (session_id, generation), indexes in wanted.items():
        found = MessageRow.objects.filter(session_id=session_id, generation=generation, index__in=indexes)
        for index, data in found.values_list("index", "data"):
            messages[(session_id, generation, index)] = data
    out = []
    for session_id, generation, type_, turn_id, stored in whole:
        data = {"type": type_, "turn_id": turn_id, **stored}
        if FROM in data:
            index = data.pop(FROM)
            msg = messages.get((session_id, generation, index), {})
            field, value = _RESTORE[data["type"]]
            data[field] = value(msg, data)
            data.pop(CALL, None)
            for key, derived in _DERIVED.get(data["type"], ()):
                if key not in data:
                    data[key] = derived(msg, index)
            copied = _COPIED.get(data["type"])
            if copied and copied not in data and msg.get(copied):
                data[copied] = msg[copied]
        out.append(data)
    return out


def _bare(data: Any) -> bool:
    """A reference stored as the message's position alone (``stored``)."""
    return isinstance(data, int) and not isinstance(data, bool)


def refers(data: dict[str, Any] | int) -> bool:
    """Whether an event row's stored JSON refers to a message (and so keeps no time)."""
    return _bare(data) or (isinstance(data, dict) and FROM in data)


class _MessageIndex(Func):
    """The position an event row's stored JSON refers to: the bare number, or its ``"$from"``."""

    output_field = IntegerField()
    arity = 1

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template=(
                "(CASE WHEN json_typeof(%(expressions)s) = 'number' THEN (%(expressions)s)::text::integer "
                f"ELSE (%(expressions)s ->> '{FROM}')::integer END)"
            ),
            **extra,
        )

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            template=(
                "(CASE WHEN json_type(%(expressions)s) = 'integer' THEN CAST(%(expressions)s AS INTEGER) "
                f"ELSE CAST(json_extract(%(expressions)s, '$.\"{FROM}\"') AS INTEGER) END)"
            ),
            **extra,
        )


def timed(events: QuerySet) -> QuerySet:
    """``events`` (Event rows) with ``at``: when each was committed, its own ``created_at`` or,
    for a row that refers to a message and keeps none, that message's."""
    message_at = MessageRow.objects.filter(
        session_id=OuterRef("session_id"),
        generation=OuterRef("generation"),
        index=OuterRef("message_index"),
    ).values("created_at")[:1]
    return events.annotate(message_index=_MessageIndex("data")).annotate(
        at=Coalesce("created_at", Subquery(message_at))
    )
