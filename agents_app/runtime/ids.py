"""Turn ids: made in time order (a UUIDv7 layout), shown short."""

from __future__ import annotations

import secrets
import time


def new_turn_id(now_ms: int | None = None) -> str:
    """A new turn's id: 32 hex digits laid out as a UUIDv7 (RFC 9562): the milliseconds since
    the epoch, then 74 random bits. Ids made later sort later, so the indexes keyed by a turn
    (its row's, its Step rows') take new entries at their right edge and keep their pages
    full; under random ids (uuid4) every new turn lands on a random leaf and the pages sit about
    two thirds full. 74 random bits keep an id as unguessable as it needs to be (access is
    checked by session, never by knowing an id)."""
    ms = (time.time_ns() // 1_000_000 if now_ms is None else now_ms) & ((1 << 48) - 1)
    rand = secrets.randbits(74)
    value = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return f"{value:032x}"


def short_turn_id(turn_id: str) -> str:
    """A turn id as a console shows it in short: its last 12 digits, where a new id is random
    (``new_turn_id``'s first 12 are its millisecond: turns of one second share them)."""
    return turn_id if len(turn_id) <= 12 else "…" + turn_id[-12:]
