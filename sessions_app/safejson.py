"""JSON from outside, parsed and bounded in one place for every transport (the HTTP API, the
websocket's frames, the inbound webhook).

What a client may send and what it gets for anything else (a 400 ``bad_request``, the same
message on every transport):

- valid UTF-8 JSON (RFC 8259): no ``NaN``/``Infinity``, no number too large for a finite
  double (``1e999``), no integer longer than Python converts (4300 digits);
- at most ``MAX_DEPTH`` nested arrays/objects, checked on the raw text before parsing, without
  recursion (the parser itself would hit Python's recursion limit: a ``RecursionError``);
- no string (key or value) with NUL (``\\u0000``) or an unpaired surrogate (``"\\ud800"``):
  PostgreSQL stores neither in ``text`` nor in ``jsonb``, and neither is valid UTF-8 text.

The size bound stays with each transport (its own limit and error).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from sessions_app.site_errors import BadRequest

MAX_DEPTH = 64

NOT_JSON = "not valid JSON"
TOO_DEEP = f"JSON nested deeper than {MAX_DEPTH} levels"
BAD_STRING = "strings may not contain NUL (\\u0000) or unpaired surrogates"

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_FORBIDDEN = re.compile("[\x00\ud800-\udfff]")


def has_forbidden(text: str) -> bool:
    """True if ``text`` holds a NUL or a lone surrogate (not storable, not UTF-8)."""
    return _FORBIDDEN.search(text) is not None


def check_string(text: str) -> str:
    if has_forbidden(text):
        raise BadRequest(BAD_STRING)
    return text


def too_deep(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text nests more than ``limit`` arrays/objects (brackets inside strings
    do not count). Linear, no recursion; malformed text is left to the parser."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def loads(raw: bytes | str, *, what: str = "the body") -> Any:
    """Parse untrusted JSON; BadRequest (``what`` is not valid JSON, too deep, a bad string)."""
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequest(f"{what} is {NOT_JSON}") from None
    if too_deep(raw):
        raise BadRequest(f"{what} is {TOO_DEEP}")
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):  # RecursionError: cannot happen after too_deep, kept as a floor
        raise BadRequest(f"{what} is {NOT_JSON}") from None
    check_strings(value)
    return value


def check_strings(value: Any) -> None:
    """BadRequest if any string in ``value`` (keys included) holds NUL or a lone surrogate.
    Iterative: ``value`` may come from elsewhere than ``loads`` (a test client, a Python caller)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_string(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    check_string(key)
                stack.append(child)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
