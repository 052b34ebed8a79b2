"""The transcripts this process has already decoded, so that loading a turn reads and decodes
only the messages it has not seen: a turn's load costs the same at 10 or 2,000 messages. And
the facts of a turn's row that never change (its session, generation, parent), so that a
checkpoint need not read them back (``facts``).

Sound because the message log is append-only: a position (session, generation, index) is taken
once (a unique constraint) and no message row is ever updated, so a stretch of positions read
once stays true; a reset moves the session to a new generation (another key), and a deleted
session's id is never handed out again (SQLite: AUTOINCREMENT). Only committed rows go in: what
a load on the store's own connection read (never inside a caller's transaction), and what a
unit on it wrote (its batch commits at its Sync; on SQLite, once its COMMIT returned). A stretch only
grows at its end, one position after the other; a write that does not continue it is left for
the next load to read.

On SQLite (``lite``) a load reads the turn's row first, in the same transaction: it asks for
what is held for that session and generation (``since``) and reads only past its end.

On PostgreSQL the load does not know a turn's session before its claim's batch comes back, so
the turns this process created, claimed or handed its chain to are remembered with their session
(``remember``): the load sends the stretch it holds for that session, and the database reads
only past its end when the turn is in that session and generation (``reads.LOAD_OF_ATTEMPT_PG``).
Bounded: the most recently used sessions and turns.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agents_app.runtime.messages import Message
from sessions_app.store import jsontext

MAX_SESSIONS = 32
MAX_TURNS = 1024

Key = tuple[int, int]  # (session id, generation)


@dataclass(slots=True)
class Stretch:
    """The messages at positions ``start`` .. ``end - 1`` of one session's generation."""

    start: int
    messages: list[Message] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + len(self.messages)

    def between(self, start: int, end: int) -> list[Message]:
        return self.messages[start - self.start : end - self.start]


_lock = threading.Lock()
_stretches: OrderedDict[Key, Stretch] = OrderedDict()
_turns: OrderedDict[str, Key] = OrderedDict()


def _bounded(cache: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def remember(turn_id: str, session_id: int, generation: int) -> None:
    """``turn_id`` belongs to this session's generation (a guess a load checks)."""
    with _lock:
        _bounded(_turns, turn_id, (session_id, generation), MAX_TURNS)


def known(turn_id: str) -> tuple[Key, Stretch] | None:
    """A copy of the stretch held for the session ``turn_id`` was last seen in, if any."""
    with _lock:
        key = _turns.get(turn_id)
        stretch = _stretches.get(key) if key is not None else None
        if key is None or stretch is None:
            return None
        _stretches.move_to_end(key)
        return key, Stretch(stretch.start, list(stretch.messages))


def since(key: Key, start: int) -> tuple[int, list[Message]]:
    """(end, a copy of the messages at ``start`` .. ``end - 1``) held for ``key``; (``start``,
    []) when nothing held covers ``start``. For a load that knows its session (``lite``)."""
    with _lock:
        stretch = _stretches.get(key)
        if stretch is None or not stretch.start <= start <= stretch.end:
            return start, []
        _stretches.move_to_end(key)
        return stretch.end, stretch.messages[start - stretch.start :]


def read(key: Key, start: int, messages: list[Message]) -> None:
    """A load read ``messages`` from position ``start`` to the end (committed rows)."""
    with _lock:
        stretch = _stretches.get(key)
        if stretch is not None and stretch.start <= start <= stretch.end:
            del stretch.messages[start - stretch.start :]
            stretch.messages.extend(messages)
            _stretches.move_to_end(key)
        else:
            _bounded(_stretches, key, Stretch(start, list(messages)), MAX_SESSIONS)


def wrote(key: Key, messages: list[tuple[int, Message]], rows: list[str], turn_id: str) -> None:
    """A committed unit of ``turn_id`` wrote ``messages`` (position, message) as the JSON
    ``rows`` (``checkpoint.row_json``): they continue the stretch if they start at its end.
    Held as a load decodes them: the row read back, with the role and turn id its columns hold
    where the row has none (``reads.WHOLE``)."""
    stretch = _stretches.get(key)
    if not messages or stretch is None or messages[0][0] != stretch.end:
        return
    decoded = []
    for (index, m), text in zip(messages, rows, strict=True):
        data = jsontext.loads(text)
        data.setdefault("role", str(m.role))
        data.setdefault("turn_id", turn_id)
        decoded.append((index, Message.from_json(data)))
    messages = decoded
    with _lock:
        stretch = _stretches.get(key)
        if stretch is None:
            return
        for index, message in messages:
            if index != stretch.end:
                return
            stretch.messages.append(message)


#: what never changes on a turn's row, by turn id: (session id, generation, parent id, spawn step),
#: read by a claim or a checkpoint (``checkpoint_plain.write_plain`` then asks its fence for none of it)
Facts = tuple[int, int, "str | None", "str | None"]
_facts: dict[str, Facts] = {}
MAX_FACTS = 4096


def remember_facts(turn_id: str, facts: Facts) -> None:
    if len(_facts) >= MAX_FACTS:
        _facts.clear()
    _facts[turn_id] = facts


def facts(turn_id: str) -> Facts | None:
    return _facts.get(turn_id)


def clear() -> None:
    """Forget everything (tests that recreate the database)."""
    with _lock:
        _stretches.clear()
        _turns.clear()
        _facts.clear()
