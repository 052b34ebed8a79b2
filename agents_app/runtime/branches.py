"""Branches of a conversation, as pure rules over plain data (both stores apply them inside the
transaction that forks or switches, ``AgentSession`` before it asks).

Editing an earlier user message, or regenerating the last reply, forks the live generation at
the opening of a person's turn: the new branch is a generation of its own that holds the
messages before the fork point, then its own. The branch that was left stays, and any branch of
the live one's tree can be made live again. Branches are made and switched only while the
session is idle, so no turn ever writes into a branch that is not live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .errors import JuneError, SessionBusyError, TurnConflictError
from .messages import Role
from .seams import TurnStatus

#: a session with a turn in one of these is busy: no fork, no switch (a queued turn would run on
#: a branch it was not sent to; a parked one would be answered on another)
BUSY = frozenset({TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.SUSPENDED})

#: events a fork does not copy into the new branch: ``branch.switched`` says "this branch has just
#: become live"; a copy in a later branch would say it of a branch that is not live (a page
#: replaying the copy took it for a live switch and reloaded, over and over)
NOT_COPIED = frozenset({"branch.switched"})


class ForkPointError(JuneError):
    """The message to fork at is not the opening of a person's turn in the live branch (422)."""

    http_status = 422
    code = "not_a_fork_point"


def check_idle(*, busy: bool) -> None:
    if busy:
        raise SessionBusyError(
            "the session has a turn queued, running or waiting for an answer: "
            "wait for it to end (or cancel it) before editing or regenerating"
        )


def check_fork_point(*, at: int, role: str | None, opened_here: bool) -> None:
    """A branch starts at a message a person sent that opened its turn (``opened_here``): an
    edit replaces it, a regenerate sends it again."""
    if role is None:
        raise ForkPointError(f"the live branch has no message {at}")
    if role != Role.USER or not opened_here:
        raise ForkPointError(f"message {at} is not a message a person sent to open a turn")


def check_regenerable(*, turn_id: str, last: str | None) -> None:
    """Only the live branch's last turn that a person opened is regenerated."""
    if last != turn_id:
        raise TurnConflictError("only the last turn of the live branch, opened by a person, can be regenerated")


def fork_compaction(summaries: Iterable[tuple[int, int]], at: int) -> tuple[int, int | None]:
    """(boundary, summary index) of a branch forked at ``at``, from the parent's summaries
    ``(summary index, its boundary)``: the newest summary before the fork point with its
    boundary, so the model sees what it saw on the parent there; no summary (boundary 0) when
    the parent was first compacted after the fork point."""
    before = [(index, boundary) for index, boundary in summaries if index < at and boundary <= index]
    if not before:
        return 0, None
    index, boundary = max(before)
    return boundary, index


@dataclass(frozen=True, slots=True)
class BranchNode:
    generation: int
    parent: int | None
    fork_index: int


def alternatives(nodes: Sequence[BranchNode], generation: int, index: int) -> list[int]:
    """The branches that share ``generation``'s messages before ``index`` and each hold another
    message at ``index``, oldest first: what a switcher "‹ i/n ›" under that message steps
    through (one entry: no switcher). A branch forked at ``index`` holds a message of its own
    there; one forked later holds its parent's."""
    by_gen = {n.generation: n for n in nodes}
    top = generation  # the oldest ancestor with the same messages before ``index``
    while (n := by_gen.get(top)) is not None and n.parent is not None and n.fork_index >= index:
        top = n.parent
    found, stack = [top], [top]
    while stack:  # every branch below ``top`` that keeps the messages before ``index``
        parent = stack.pop()
        for n in nodes:
            if n.parent == parent and n.fork_index >= index:
                stack.append(n.generation)
                if n.fork_index == index:
                    found.append(n.generation)
    return sorted(found)


def holder(nodes: Sequence[BranchNode], generation: int, index: int) -> int:
    """Which of ``alternatives(nodes, generation, index)`` holds ``generation``'s message at ``index``."""
    by_gen = {n.generation: n for n in nodes}
    at = generation
    while (n := by_gen.get(at)) is not None and n.parent is not None and n.fork_index > index:
        at = n.parent
    return at


def tree_of(nodes: Sequence[BranchNode], generation: int) -> set[int]:
    """The generations of ``generation``'s tree (its root and everything forked from it)."""
    by_gen = {n.generation: n for n in nodes}
    root = generation
    while (n := by_gen.get(root)) is not None and n.parent is not None:
        root = n.parent
    members, stack = {root}, [root]
    while stack:
        parent = stack.pop()
        for n in nodes:
            if n.parent == parent and n.generation not in members:
                members.add(n.generation)
                stack.append(n.generation)
    return members
