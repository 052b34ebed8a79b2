"""A new row's ``INSERT`` as the store's statements write it (``opening``'s creation): the
columns it names and how each gets its value, the model's constant defaults written into the
statement as typed literals, so that a creation sends only what varies."""

from __future__ import annotations

from typing import Any

from django.db import connection, models

from sessions_app.store import checkpoint, wire


def _columns(model: type[models.Model], *, skip: tuple[str, ...] = ()) -> tuple[models.Field, ...]:
    """The columns an INSERT names: all but an automatic primary key (and ``skip``)."""
    return tuple(
        f for f in model._meta.concrete_fields if not (f.primary_key and f.auto_created) and f.name not in skip
    )


#: a default written into the INSERT itself, as a typed literal: one that every row takes alike
#: (not a callable's), of a plain type
LITERAL_TYPES = (type(None), str, int, float, bool)


class Row:
    """A new row of ``model``: the columns an INSERT names (``_columns``), in order, and how
    each gets its value — given by the caller (``given``, attribute names), the row's time
    (``auto_now``, ``auto_now_add``), a callable default called per row, or a constant default
    written into the statement as a literal. The row holds what an unsaved instance would insert
    (``Model(**given)``, then each field's ``pre_save``) with no instance built: a creation
    sends less than half the parameters it would, and the ORM's per-field work is done once, here."""

    def __init__(self, model: type[models.Model], *, given: tuple[str, ...], skip: tuple[str, ...] = ()) -> None:
        self.names: list[str] = []  # the quoted column names
        self.slots: list[str] = []  # per column: its placeholder (``%s::type``) or its literal
        self.params: list[tuple[str, str, Any]] = []  # per placeholder: (how, attribute name, field)
        self.constants: dict[str, Any] = {}  # the literals' values, by attribute name
        for f in _columns(model, skip=skip):
            self.names.append(connection.ops.quote_name(f.column))
            cast = f.db_type(connection)
            literal = None
            if f.attname in given:
                how = "given"
            elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
                how = "now"
            else:
                how = "default"
                if not (f.has_default() and callable(f.default)) and isinstance(f.get_default(), LITERAL_TYPES):
                    literal = _literal(f.get_default(), f, cast)
            if literal is None:
                self.slots.append(f"%s::{cast}")
                self.params.append((how, f.attname, f))
            else:
                self.slots.append(literal)
                self.constants[f.attname] = f.get_default()
        missing = set(given) - {name for how, name, _ in self.params if how == "given"}
        if missing:
            raise ValueError(f"{model.__name__} has no column for {sorted(missing)}")

    def values(self, given: dict[str, Any], now: Any) -> tuple[list[Any], dict[str, Any]]:
        """(the placeholders' parameters, as the wire sends them; the row by attribute name)."""
        params: list[Any] = []
        row = dict(self.constants)
        for how, name, f in self.params:
            value = given[name] if how == "given" else now if how == "now" else f.get_default()
            row[name] = value
            params.append(checkpoint.dumps(value) if value is not None and isinstance(f, models.JSONField) else value)
        return params, row


def _literal(value: Any, field: models.Field, cast: str) -> str | None:
    """``value`` as a typed SQL literal of ``field``'s column; None when its text would need an
    escape (under either setting of ``standard_conforming_strings``)."""
    if value is None:
        return f"NULL::{cast}"
    text = checkpoint.dumps(value) if isinstance(field, models.JSONField) else bytes(wire.param(value) or b"").decode()
    if "'" in text or "\\" in text:
        return None
    return f"'{text}'::{cast}"
