"""The in-memory store's branches (``branches.py`` has the rules): a fork copies the live
generation's messages before the fork point, and the events of their turns, into a new
generation and makes it live; a switch makes another branch of the same tree live."""

from __future__ import annotations

from typing import Callable

from . import branches
from . import events as ev
from .errors import NotFound
from .memory_rows import BranchRow, SessionRow
from .messages import Role
from .seams import LoggedEvent

Log = Callable[[SessionRow, list[ev.TurnEvent]], list[LoggedEvent]]


def nodes(s: SessionRow) -> list[branches.BranchNode]:
    return [branches.BranchNode(g, b.parent, b.fork_index) for g, b in s.branches.items()]


def openings(s: SessionRow) -> dict[str, int]:
    """turn id -> the position of its first message in the live generation."""
    first: dict[str, int] = {}
    for i, message in enumerate(s.messages):
        if message.turn_id is not None:
            first.setdefault(message.turn_id, i)
    return first


def fork_point(s: SessionRow, *, at: int | None, regenerate: str | None) -> tuple[int, str]:
    """(position, the turn opened there) under ``branches.check_fork_point``/``check_regenerable``."""
    opened = openings(s)
    if regenerate is not None:
        last = max(((i, t) for t, i in opened.items() if s.messages[i].role == Role.USER), default=None)
        branches.check_regenerable(turn_id=regenerate, last=last[1] if last else None)
        assert last is not None
        return last
    assert at is not None
    message = s.messages[at] if 0 <= at < len(s.messages) else None
    turn = message.turn_id if message is not None else None
    branches.check_fork_point(
        at=at, role=message.role if message else None, opened_here=turn is not None and opened.get(turn) == at
    )
    assert turn is not None
    return at, turn


def fork(s: SessionRow, at: int, opener: str, log: Log) -> list[LoggedEvent]:
    """The new branch, live; ``branch.switched`` logged in it."""
    previous = s.generation
    s.branches.setdefault(previous, BranchRow(parent=None, fork_index=0))
    s.branches[previous].boundary, s.branches[previous].summary = s.boundary, s.summary
    s.generations += 1
    generation = s.generations
    cut = min((seq for g, seq, e in s.events if g == previous and e.turn_id == opener), default=s.seq + 1)
    s.events += [
        (generation, seq, e)
        for g, seq, e in s.events
        if g == previous and seq < cut and e.type not in branches.NOT_COPIED
    ]
    s.archive[previous] = s.messages
    s.messages = list(s.messages[:at])
    s.boundary, s.summary = branches.fork_compaction(
        ((i, m.boundary or 0) for i, m in enumerate(s.messages) if m.role == Role.SUMMARY), at
    )
    s.branches[generation] = BranchRow(parent=previous, fork_index=at)
    s.generation = generation
    return log(s, [ev.BranchSwitched("", generation=generation, previous=previous, at=at)])


def switch(s: SessionRow, generation: int, log: Log) -> list[LoggedEvent]:
    """``generation`` live again (a branch of the live one's tree); nothing when it is live."""
    if generation == s.generation:
        return []
    if generation not in s.branches or generation not in branches.tree_of(nodes(s), s.generation):
        raise NotFound(f"no branch g{generation} of this conversation")
    previous = s.generation
    s.branches[previous].boundary, s.branches[previous].summary = s.boundary, s.summary
    s.archive[previous] = s.messages
    s.messages = s.archive.pop(generation, [])
    s.boundary, s.summary = s.branches[generation].boundary, s.branches[generation].summary
    s.generation = generation
    return log(s, [ev.BranchSwitched("", generation=generation, previous=previous)])
