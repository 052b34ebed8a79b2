"""``store.jsontext``: the store's JSON without the json module's per-call layers (9k
instructions each way on a unit's small documents). Pins: the same text as
``json.dumps(separators=(",", ":"))`` and the same values and errors as ``json.loads``."""

from __future__ import annotations

import json

import pytest

from sessions_app.store import jsontext

VALUES = [
    {"a": 1, "b": [1, 2.5, None, True, 'x\u00e9"\n']},
    "text",
    3,
    -0.5,
    1e-07,
    [],
    {},
    float("inf"),
    {"call": {"id": "t1_0", "name": "noop", "input": {"n": 1}}, "$from": 3},
    2**70,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_same_text_and_the_same_value(value):
    text = jsontext.dumps(value)
    assert text == json.dumps(value, separators=(",", ":"))
    assert jsontext.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", [' {"a": 1}', '{"a": 1}\n', b'{"a": 1}', "[1, 2]", '"s"'])
def test_what_the_scanner_does_not_take_whole_goes_through_json_loads(text):
    assert jsontext.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ['{"a": 1}x', "", "nope", "{", '{"a": }'])
def test_the_same_errors(text):
    with pytest.raises(json.JSONDecodeError) as mine:
        jsontext.loads(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert str(mine.value) == str(theirs.value)


def test_what_json_cannot_keep_is_refused_as_json_refuses_it():
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsontext.dumps({"a": object()})
