"""Hostile JSON for Hypothesis: what an attacker sends instead of what the API expects.

Values (serialized by ``encode``, sometimes with raw, invalid UTF-8 for lone surrogates) and
raw bodies that no serializer produces: deep nesting (also inside a valid object), NaN and
Infinity, numbers beyond a double, integers past Python's 4300 digits, broken UTF-8, BOMs,
truncated JSON, oversize bodies."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

NASTY = [
    "",
    " ",
    "\t\n\r",
    "\u00a0",
    "\u2028",
    "\ufeff",
    "\u0000",
    "a\u0000b",
    "\ud800",
    "order a\ud800b",
    "\udfff",
    "\ud83d",
    "\ude00",
    "\U0001f600",
    "²",
    "٣",
    "\u202e",
    "\\u0000",
    "null",
    "true",
    "0",
    "-1",
    "1e999",
    "NaN",
    "../../etc/passwd",
    "%00",
    "%2e%2e",
    "<script>alert(1)</script>",
    "'; DROP TABLE sessions_app_turn; --",
    "approve-refund",
    "start",
    "x" * 201,
    "x" * 32_001,
    "€" * 20_000,
]

strings = st.one_of(
    st.sampled_from(NASTY),
    st.text(max_size=30),
    st.text(st.characters(codec="utf-8"), max_size=10),
    st.text(st.characters(categories=["Cs", "Cc", "Zs", "Cf"]), min_size=1, max_size=6),  # surrogates, NUL, …
)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**300), max_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)),
    max_leaves=12,
)


def nested(depth: int, inner: str = "1") -> str:
    kind = depth % 2
    return ("[" * depth + inner + "]" * depth) if kind else ('{"a":' * depth + inner + "}" * depth)


#: raw JSON-ish text no serializer writes, to be spliced in where a value goes
raw_values = st.one_of(
    st.sampled_from(
        [
            "NaN",
            "Infinity",
            "-Infinity",
            "1e999",
            "-1e999",
            "1" * 5000,
            "0" * 3000 + "1",
            "1." + "0" * 5000,
            '"\\ud800"',
            '"\\u0000"',
            '"\\uDFFF\\uD800"',
            '"unterminated',
            "tru",
            "[1,]",
            "{'a': 1}",
            '"\\x41"',
            "",
            "[" * 10,
        ]
    ),
    st.integers(min_value=60, max_value=70).map(nested),
    st.sampled_from([1_000, 20_000, 50_000]).map(nested),
)


def encode(value: Any, *, ascii_only: bool) -> bytes:
    """JSON bytes of ``value``: \\u-escaped (``ascii_only``) or raw UTF-8 (lone surrogates as
    invalid UTF-8 bytes, as a broken client would send them). Integers past Python's digit
    limit are written by hand."""
    try:
        text = json.dumps(value, ensure_ascii=ascii_only)
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        text = "1" * 5000
    return text.encode("utf-8", "surrogatepass")


@st.composite
def body_with(draw: st.DrawFn, fields: dict[str, st.SearchStrategy], *, raw_at: tuple[str, ...] = ()) -> bytes:
    """A JSON object body: the expected ``fields`` (each present or not), maybe unknown fields,
    maybe one field whose value is raw hostile text (``raw_at`` or an unknown one)."""
    obj: dict[str, Any] = {}
    for name, strategy in fields.items():
        if draw(st.booleans()) or draw(st.booleans()):
            obj[name] = draw(strategy)
    if draw(st.integers(0, 4)) == 0:
        obj[draw(strings)] = draw(values)
    ascii_only = draw(st.booleans())
    text = encode(obj, ascii_only=ascii_only).decode("utf-8", "surrogatepass")
    if draw(st.integers(0, 2)) == 0:
        target = draw(st.sampled_from(raw_at or ("extra",)))
        splice = f'"{target}":' + draw(raw_values)
        text = "{" + splice + ("," + text[1:] if len(text) > 2 else "}")
    return text.encode("utf-8", "surrogatepass")


whole_bodies = st.one_of(
    values.map(lambda v: encode(v, ascii_only=True)),
    raw_values.map(str.encode),
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"\xef\xbb\xbf{}",
            b"\xff\xfe{",
            b'{"text": "\xed\xa0\x80"}',
            b"\x00",
            b" ",
            b'{"text": "' + b"x" * 300_000 + b'"}',
        ]
    ),
)


@st.composite
def plausible_body(draw: st.DrawFn, fields: dict[str, st.SearchStrategy]) -> bytes:
    """A body a client could mean: the fields with legal (if odd) values, raw UTF-8 or escaped."""
    obj = {name: draw(strategy) for name, strategy in fields.items()}
    return encode(obj, ascii_only=draw(st.booleans()))


ATTACKS = ["plausible", "plausible", "plausible", "fields", "whole", "deep", "nul", "surrogate", "number"]
DEPTHS = [65, 1_000, 30_000]  # 30,000: a 60 KB body, under every transport's size bound


def _splice(obj: dict[str, Any], name: str, raw: str, *, ascii_only: bool = True) -> bytes:
    """``obj`` as JSON with ``name``'s value replaced by the raw text ``raw``."""
    rest = {k: v for k, v in obj.items() if k != name}
    text = encode(rest, ascii_only=ascii_only).decode("utf-8", "surrogatepass")
    member = json.dumps(name) + ":" + raw
    return ("{" + member + ("," + text[1:] if rest else "}")).encode("utf-8", "surrogatepass")


@st.composite
def body(
    draw: st.DrawFn,
    fields: dict[str, st.SearchStrategy],
    *,
    raw_at: tuple[str, ...] = (),
    plausible: dict[str, st.SearchStrategy] | None = None,
) -> bytes:
    """One attack, drawn evenly: a body a client could mean (``plausible``: the success paths),
    the endpoint's fields with hostile values, anything at all, or a plausible body with one
    value turned hostile: nested past the bound, a NUL or a lone surrogate in a string or a
    key, a number JSON cannot store."""
    attack = draw(st.sampled_from(ATTACKS))
    if plausible is None or attack == "fields":
        return draw(body_with(fields, raw_at=raw_at))
    if attack == "whole":
        return draw(whole_bodies)
    obj = {name: draw(strategy) for name, strategy in plausible.items()}
    if attack == "plausible":
        return encode(obj, ascii_only=draw(st.booleans()))
    name = draw(st.sampled_from(sorted(obj)))
    if attack == "deep":
        return _splice(obj, name, nested(draw(st.sampled_from(DEPTHS))))
    if attack == "number":
        return _splice(obj, name, draw(st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "1" * 5000])))
    bad = "\x00" if attack == "nul" else draw(st.sampled_from(["\ud800", "\udfff", "\ud83d"]))
    where = draw(st.sampled_from(["value", "key", "nested"]))
    if where == "key":
        obj["k" + bad] = 1
    elif where == "nested" or not isinstance(obj[name], str):
        obj[name] = {"note": ["x" + bad]}
    else:
        at = draw(st.integers(0, len(obj[name])))
        obj[name] = obj[name][:at] + bad + obj[name][at:]
    return encode(obj, ascii_only=attack == "nul" or draw(st.booleans()))


#: legal but odd text: any Unicode scalar value but NUL, not only whitespace
legal_texts = st.one_of(
    st.sampled_from(
        [
            "order blue mugs",
            "refund order 42 10",
            "stock mugs",
            "€" * 100,
            "\U0001f600 hi",
            "a" * 32_000,
            "\u202eevil",
            "line\nbreak",
            "tab\there",
            "\u2028",
            "<b>x</b>",
            "'; --",
        ]
    ),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=60).filter(str.strip),
)
legal_keys = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:@-]{0,30}\Z")


@st.composite
def mostly(draw: st.DrawFn, legal: st.SearchStrategy, hostile: st.SearchStrategy) -> Any:
    """``legal`` two times in three, else ``hostile``."""
    return draw(legal if draw(st.integers(0, 2)) < 2 else hostile)


session_keys = mostly(
    st.one_of(st.sampled_from(["s1", "s2", "k.e_y:1@x-", "a" * 200]), legal_keys), strings.filter(bool)
)
turn_ids = st.one_of(st.text("0123456789abcdef", min_size=32, max_size=32), strings.filter(bool))
legal_seqs = st.one_of(st.sampled_from(["0", "1", "2", "9" * 18]), st.integers(0, 10**18 - 1).map(str))
seqs = st.one_of(
    legal_seqs,
    st.sampled_from(["0", "1", "9" * 18, "9" * 19, "1" * 23, "²", "٣", "-1", "+1", " 7 ", "1_0", "0x1"]),
    strings,
)
legal_bools = st.sampled_from(["1", "0", "true", "FALSE", " yes ", "on", "off", "No"])
query_bools = st.one_of(st.sampled_from(["maybe", "", "2", "truee", "\u0000"]), strings)
query_numbers = st.one_of(
    st.sampled_from(
        [
            "1",
            "0",
            "0.5",
            "1e-05",
            "inf",
            "nan",
            "1e400",
            "٣",
            "1_0",
            "-1",
            "86400",
            "86401",
            "1000000",
            "1000001",
            "9" * 400,
        ]
    ),
    strings,
)
