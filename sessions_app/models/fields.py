"""The model fields of sessions_app that Django has not: JSON kept as text on PostgreSQL too, a
turn id in 17 bytes (``bytea``) on PostgreSQL, an event type as a smallint code. Their
migrations name them ``sessions_app.models.<Field>`` (``deconstruct``), where they are exported."""

from __future__ import annotations

import functools
import re

from django import forms
from django.db import models


class _NamedInModels:
    """Migrations name the field where ``sessions_app.models`` exports it, whatever module
    defines it: moving a field between modules changes no migration."""

    def deconstruct(self):
        name, path, args, kwargs = super().deconstruct()  # type: ignore[misc]
        return name, f"sessions_app.models.{type(self).__name__}", args, kwargs


class TextJSONField(_NamedInModels, models.JSONField):
    """JSON kept as its text on PostgreSQL too (``json``, not ``jsonb``): a small message's
    JSON costs its length, not jsonb's header per key and value (``BENCH_ONLY=storage
    bench/bench_engine.py`` prints the bytes per message). Nothing queries
    inside it (``?`` and ``@>`` are jsonb's); the transcript reads cast it where they merge it
    (``reads.WHOLE_PG``)."""

    def db_type(self, connection):
        return "json" if connection.vendor == "postgresql" else super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        if value is not None and not isinstance(value, (str, bytes, bytearray)):  # the driver decoded json
            return value
        return super().from_db_value(value, expression, connection)


#: a turn id as the site makes them (``new_turn_id``) and as a child's is derived: 32 hex digits
HEX_TURN_ID = re.compile(r"[0-9a-f]{32}")


@functools.lru_cache(maxsize=4096)  # a turn's units ask for their turn's again and again
def turn_ref(turn_id: str) -> bytes:
    """A turn id as ``TurnRefField`` stores it on PostgreSQL: an id of 32 lowercase hex digits
    (every id the site makes) as its 16 bytes, any other id as its UTF-8 after 0xff, twice when
    that would make 16 bytes (16 bytes are a hex id's alone; UTF-8 has no 0xff). The migration
    that made the column (0019) defines the same in SQL: ``june_tid(text)``, ``june_tid_text(bytea)``."""
    if len(turn_id) == 32 and HEX_TURN_ID.fullmatch(turn_id):
        return bytes.fromhex(turn_id)
    raw = turn_id.encode()
    return (b"\xff\xff" if len(raw) == 15 else b"\xff") + raw


def turn_of_ref(ref: bytes | memoryview) -> str:
    """``turn_ref``'s inverse."""
    ref = bytes(ref)
    return ref.hex() if len(ref) == 16 else ref.lstrip(b"\xff").decode()


class TurnRefField(_NamedInModels, models.CharField):
    """The turn a message or an event row belongs to: its id, a string in Python (filters,
    ``values_list``, the admin), stored on PostgreSQL as ``turn_ref``'s bytes: 17 bytes a row
    where the id's text took 33, in every message and event row. No foreign key: nothing joins
    these rows to their turn, and a turn's rows are found by position (``Turn.opening``) or by
    session. SQLite stores the id's text (its rows are already small)."""

    description = "turn id (16 bytes on PostgreSQL)"

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_length", 32)
        super().__init__(*args, **kwargs)

    def db_type(self, connection):
        return "bytea" if connection.vendor == "postgresql" else super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        value = super().get_db_prep_value(value, connection, prepared)
        if value is None or connection.vendor != "postgresql" or hasattr(value, "resolve_expression"):
            return value
        return turn_ref(value)

    def from_db_value(self, value, expression, connection):
        return turn_of_ref(value) if isinstance(value, (bytes, memoryview)) else value


class AsTurnRef(models.Func):
    """A turn id expression (``OuterRef("pk")`` of a turn) as a ``TurnRefField`` column compares
    with it: ``june_tid(...)`` on PostgreSQL, the text itself elsewhere."""

    function = "june_tid"
    arity = 1

    def __init__(self, expression, **extra):
        super().__init__(expression, output_field=TurnRefField(), **extra)

    def as_sql(self, compiler, connection, **extra):
        return compiler.compile(self.source_expressions[0])

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, **extra)


class TurnRefText(models.Func):
    """A ``TurnRefField`` column as the turn id's text (``june_tid_text(...)`` on PostgreSQL),
    for a query whose column must be text: a UNION with a foreign key to a turn."""

    function = "june_tid_text"
    arity = 1

    def __init__(self, expression, **extra):
        super().__init__(expression, output_field=models.CharField(), **extra)

    def as_sql(self, compiler, connection, **extra):
        return compiler.compile(self.source_expressions[0])

    def as_postgresql(self, compiler, connection, **extra):
        return super().as_sql(compiler, connection, **extra)


#: an event type's code in ``Event.type`` (the runtime's closed set, ``events.EVENT_TYPES``).
#: Written out, never renumbered: a code is what the rows already hold. A new type takes the
#: next number; a type the runtime drops keeps its code, unused.
EVENT_TYPE_CODES: dict[str, int] = {
    "turn.started": 1,
    "reasoning.delta": 2,
    "message.delta": 3,
    "message.completed": 4,
    "action.requested": 5,
    "action.completed": 6,
    "input.requested": 7,
    "input.answered": 8,
    "child.started": 9,
    "turn.completed": 10,
    "turn.failed": 11,
    "turn.cancelled": 12,
    "session.reset": 13,
    "compaction.started": 14,
    "compaction.completed": 15,
    "compaction.failed": 16,
    "branch.switched": 17,
    "takeover.started": 18,
    "takeover.ended": 19,
    "person.message": 20,
}
EVENT_TYPE_NAMES: dict[int, str] = {code: name for name, code in EVENT_TYPE_CODES.items()}
assert len(EVENT_TYPE_NAMES) == len(EVENT_TYPE_CODES), "two event types share a code"


def event_type_code(name: str) -> int:
    """The code an event type is stored as; a type with none is a bug, refused at write time
    (never stored as a code that reads back as something else)."""
    try:
        return EVENT_TYPE_CODES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown event type {name!r}: give it a code in models.EVENT_TYPE_CODES") from None


def event_type_name(code: int) -> str:
    try:
        return EVENT_TYPE_NAMES[code]
    except KeyError:
        raise ValueError(f"unknown event type code {code!r} (written by a newer EVENT_TYPE_CODES?)") from None


class EventTypeField(_NamedInModels, models.SmallIntegerField):
    """An event's type: a string in Python (filters, ``values_list``, the admin), a smallint
    code in the database (``EVENT_TYPE_CODES``): 2 bytes a row where the name took up to 21.
    The raw SQL that writes events converts with ``event_type_code``."""

    description = "event type (stored as a smallint code)"

    @property
    def validators(self):  # IntegerField's range validators compare numbers; this holds names
        return list(self._validators)

    def get_prep_value(self, value):
        if value is None or hasattr(value, "resolve_expression"):
            return value
        return event_type_code(value)

    def from_db_value(self, value, expression, connection):
        return None if value is None else event_type_name(value)

    def to_python(self, value):
        if value is None or isinstance(value, str):
            return value
        return event_type_name(value)

    def get_internal_type(self):
        return "SmallIntegerField"

    def formfield(self, **kwargs):  # a name, not IntegerField's number input
        return models.Field.formfield(self, **{"form_class": forms.CharField, **kwargs})
