"""A quick yes for a tool input that plainly matches its schema, made once per schema.

``jsonschema``'s validator walks a schema keyword by keyword through generators for every
value it checks; a tool's schema is most often an object of a few plainly typed properties
(``define_action``'s, and most hand-written ones). :func:`compile_check` turns such a schema
into one function that says True only where the validator would find no error, and False where
it cannot tell: the validator then runs, and says what is wrong. Any other schema (a keyword not
listed here, a ``$schema`` or ``$ref``, a list of types) gets no quick check (None).

Types are checked by exact class, as ``json.loads`` makes values (a bool is no integer, an
integer is a number; a float that is a whole number is left to the validator).
"""

from __future__ import annotations

from typing import Any, Callable

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}
#: keywords that change nothing about validity
_NOTES = frozenset({"description", "title", "examples", "default"})
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"}) | _NOTES
#: a type's bounds that a quick check knows: (the lowest, the highest) keyword
_BOUNDS = {"string": ("minLength", "maxLength"), "integer": ("minimum", "maximum"), "number": ("minimum", "maximum")}

#: a property's check: its allowed classes (None: any value), and its bounds (low, high or None)
_Property = tuple[tuple[type, ...] | None, Any, Any]


def compile_check(schema: Any) -> Callable[[Any], bool] | None:
    """A check of inputs for ``schema`` (see the module), or None where it has none."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or not set(schema) <= _OBJECT_KEYS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or not isinstance(extra, bool):
        return None
    if not all(isinstance(name, str) for name in required):
        return None
    checks: dict[str, _Property] = {}
    for name, sub in properties.items():
        found = _property(sub)
        if found is None:
            return None
        checks[name] = found
    return _checker(checks, tuple(required), extra)


def _property(sub: Any) -> _Property | None:
    if not isinstance(sub, dict):
        return None
    kind = sub.get("type")
    if kind is None:
        return (None, None, None) if set(sub) <= _NOTES else None
    if not isinstance(kind, str) or kind not in _TYPES:
        return None
    low_key, high_key = _BOUNDS.get(kind, ("", ""))
    if not set(sub) <= _NOTES | {"type", low_key, high_key}:
        return None
    low, high = sub.get(low_key), sub.get(high_key)
    for bound in (low, high):
        if bound is not None and (type(bound) not in (int, float)):
            return None
    return _TYPES[kind], low, high


def _checker(checks: dict[str, _Property], required: tuple[str, ...], extra: bool) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for name in required:
            if name not in value:
                return False
        for name, item in value.items():
            found = checks.get(name)
            if found is None:
                if not extra:
                    return False
                continue
            kinds, low, high = found
            if kinds is None:
                continue
            if item.__class__ not in kinds:
                return False
            if low is not None or high is not None:
                size = len(item) if kinds[0] is str else item  # type: ignore[arg-type]
                if (low is not None and size < low) or (high is not None and size > high):
                    return False
        return True

    return check
