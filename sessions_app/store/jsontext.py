"""The store's JSON text, without the ``json`` module's per-call layers.

``json.dumps`` builds a C encoder at every call, and ``json.loads`` runs a Python decode around
the C scanner (whitespace checks, an ``Extra data`` check): for the small documents a unit
writes (a message row, an event, the journal) those layers cost more than the encoding itself,
about 9k instructions each way, and a short turn encodes ~18 and decodes ~8. Here the C
encoder is built once (compact separators, ASCII, as ``dumps`` wrote them before) and a
document is scanned in one call; anything the scanner does not take whole (bytes, surrounding
whitespace, trailing data, invalid text) goes through ``json.loads``, which decodes or raises
as it always did.

One difference, on input that is not JSON to begin with: the encoder does not look for
circular references (a cycle raises RecursionError, not ValueError). What the store encodes is
the engine's data, which the engine checks with ``json.dumps`` before it reaches a unit
(``loop_tools._json_safe``), and the store's own dictionaries.
"""

from __future__ import annotations

import json
import json.encoder
from json.decoder import JSONDecoder
from json.encoder import JSONEncoder, encode_basestring_ascii
from typing import Any

# the json module's C scanner and encoder, which its own dumps/loads reach through layers of
# Python; not in its typed interface, hence getattr
_scan = getattr(JSONDecoder(), "scan_once")  # noqa: B009
c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # noqa: B009

if c_make_encoder is not None:
    _encoder = c_make_encoder(None, JSONEncoder().default, encode_basestring_ascii, None, ":", ",", False, False, True)

    def dumps(value: Any) -> str:
        """``json.dumps(value, separators=(",", ":"))``."""
        return "".join(_encoder(value, 0))
else:  # pragma: no cover (a Python without the json module's C part)
    _plain = JSONEncoder(separators=(",", ":"))

    def dumps(value: Any) -> str:
        """``json.dumps(value, separators=(",", ":"))``."""
        return _plain.encode(value)


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``."""
    if text.__class__ is str:
        try:
            value, end = _scan(text, 0)
        except StopIteration:  # not a document at its first character: json.loads says why
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)
