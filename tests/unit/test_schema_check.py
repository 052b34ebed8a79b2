"""``schema_check``: a tool input's quick yes is never one the validator would refuse, and the
usual schemas get one."""

from __future__ import annotations

import itertools

import jsonschema
import pytest

from agents_app.runtime.model import ToolSpec
from agents_app.runtime.schema_check import compile_check
from agents_app.runtime.tools import validate_input

ORDER = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "minLength": 1, "maxLength": 5, "description": "what"},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
        "price": {"type": "number", "minimum": 0.5},
        "gift": {"type": "boolean"},
        "note": {"title": "anything"},
        "tags": {"type": "array"},
        "meta": {"type": "object"},
        "gone": {"type": "null"},
    },
    "required": ["item"],
    "additionalProperties": False,
}
OPEN = {**ORDER, "additionalProperties": True, "required": []}
BARE = {"type": "object"}
SCHEMAS = [ORDER, OPEN, BARE]

VALUES = [
    None,
    "item",
    [],
    {},
    {"item": "mug"},
    {"item": ""},
    {"item": "mugs!!"},
    {"item": "é" * 5},
    {"item": 3},
    {"item": "mug", "quantity": 1},
    {"item": "mug", "quantity": 0},
    {"item": "mug", "quantity": 11},
    {"item": "mug", "quantity": 2.0},
    {"item": "mug", "quantity": True},
    {"item": "mug", "quantity": "2"},
    {"item": "mug", "price": 0.5},
    {"item": "mug", "price": 1},
    {"item": "mug", "price": 0.25},
    {"item": "mug", "price": False},
    {"item": "mug", "gift": True},
    {"item": "mug", "gift": 1},
    {"item": "mug", "note": [1, {"x": None}]},
    {"item": "mug", "tags": ["a"], "meta": {"k": 1}, "gone": None},
    {"item": "mug", "tags": {}, "meta": []},
    {"item": "mug", "gone": 0},
    {"item": "mug", "other": 1},
    {"other": 1},
]


@pytest.mark.parametrize(("schema", "value"), list(itertools.product(SCHEMAS, VALUES)))
def test_a_quick_yes_is_the_validators_yes(schema, value):
    check = compile_check(schema)
    assert check is not None
    valid = jsonschema.validators.validator_for(schema)(schema).is_valid(value)
    if check(value):
        assert valid
    elif valid:  # the quick check leaves only a whole-number float to the validator
        assert any(isinstance(v, float) for v in value.values())


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "a"}}},
        {"type": "object", "properties": {"x": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"x": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/y"}}, "$defs": {"y": {}}},
        {"type": "object", "properties": {"x": {"type": "string", "minimum": 1}}},
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": True}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"a": {}}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
        {"type": "array"},
        True,
    ],
)
def test_any_other_schema_gets_no_quick_check(schema):
    assert compile_check(schema) is None


def test_a_refused_input_still_says_what_is_wrong():
    spec = ToolSpec("order", "orders", ORDER)
    assert validate_input(spec, {"item": "mug", "quantity": 3}) is None
    assert validate_input(spec, {"item": "mug", "quantity": 2.0}) is None
    assert validate_input(spec, {"item": "mug", "quantity": 0}) == (
        "invalid input for order at quantity: 0 is less than the minimum of 1"
    )
    assert "'item' is a required property" in validate_input(spec, {})
