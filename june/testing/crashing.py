"""The test store: the Django store on the test's own connection, which can die between steps.

``TestStore`` is ``DjangoSessionStore`` forced onto the thread path (``path="thread"``): every
unit, read and lease call goes through Django's connection on the thread that owns it — the
test's, inside pytest-django's transaction when the test has one — so a ``def`` tool's rows and
the turn's rows roll back with the test. Every unit ends in ``_write_sync`` inside a
``transaction.atomic()``: that is where a planned crash strikes (``Crash``, a BaseException
nothing in the engine catches, as a killed process would stop it):

- *after* a unit: its transaction committed (its tool's rows with it), the process dies before
  it could go on; the redelivery must not run that step again.
- *before* a unit commits: the tool ran, its writes roll back with the unit; the redelivery
  runs it again, and its rows exist once.

A unit is named by its number in the attempt's order (1 is the opening) or by a tool's name
(the unit that holds that tool's result).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from agents_app.runtime.seams import Commit
from sessions_app.store import DjangoSessionStore, host_ops
from sessions_app.store.rows import UnitWriter


class Crash(BaseException):
    """The process died (a test's planned crash). Not an Exception: the engine lets it through."""


@dataclass
class Plan:
    """What happens at which unit of a turn: ``after``/``before``: crash; ``cancel``: a cancel is
    requested as that unit commits (the turn stops at its next boundary)."""

    turn_id: str
    after: int | str | None = None
    before: int | str | None = None
    cancel: int | str | None = None
    #: units committed so far (the opening is 1), and what each held
    units: list[str] = field(default_factory=list)
    crashes: int = 0


def describe(tx: UnitWriter) -> str:
    """A unit in words: its step ids, and the tools whose results it holds."""
    names = [f"tool:{m.name}" for _, m in tx.messages if str(m.role) == "tool" and m.name]
    steps = [s for s, _, _ in tx.steps]
    return " ".join([*steps, *names]) or ("settle" if tx.turn_changes.get("status") else "unit")


def _matches(point: int | str | None, number: int, tx: UnitWriter) -> bool:
    if point is None:
        return False
    if isinstance(point, int):
        return point == number
    return any(str(m.role) == "tool" and m.name == point for _, m in tx.messages)


class TestStore(DjangoSessionStore):
    """``DjangoSessionStore`` on the thread path, with the crash and cancel plans of its turns."""

    __test__ = False  # not a pytest test class

    def __init__(self, *, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock, own_connection=False, path="thread")
        self.plans: dict[str, Plan] = {}

    def plan(self, plan: Plan) -> None:
        self.plans[plan.turn_id] = plan

    def tool_unit(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], None]) -> Commit | UnitWriter:
        if turn_id in self.plans:  # every unit through ``atomic_sync``: one place to strike
            return self.atomic_sync(turn_id, attempt_id, work)
        return super().tool_unit(turn_id, attempt_id, work)

    def atomic_sync(self, turn_id: str, attempt_id: str | None, work: Callable[[Any], None]) -> Commit:
        return self._after(turn_id, super().atomic_sync(turn_id, attempt_id, work))

    def _written_sync(self, tx: UnitWriter) -> Commit:
        return self._after(tx.turn_id, super()._written_sync(tx))

    def _write_sync(self, tx: UnitWriter) -> Commit:
        plan = self.plans.get(tx.turn_id)
        if plan is not None:
            number = len(plan.units) + 1
            if _matches(plan.before, number, tx):
                plan.before, plan.crashes = None, plan.crashes + 1
                raise Crash(f"died inside unit {number} ({describe(tx)}) before its commit")
            plan.units.append(describe(tx))
            if _matches(plan.cancel, number, tx):  # as if it came while the unit was written:
                plan.cancel = None  # the unit's commit hands it to the attempt (``Commit.cancel_reason``)
                host_ops.request_cancel(tx.turn_id, "requested")
        return super()._write_sync(tx)

    def _after(self, turn_id: str, commit: Commit) -> Commit:
        """Outside the unit's transaction: it committed (or released its savepoint)."""
        plan = self.plans.get(turn_id)
        if plan is None or not plan.units:
            return commit
        number = len(plan.units)
        if plan.after is not None and _point_is(plan.after, number, plan.units[-1]):
            plan.after, plan.crashes = None, plan.crashes + 1
            raise Crash(f"died after unit {number} ({plan.units[-1]}) committed")
        return commit


def _point_is(point: int | str, number: int, unit: str) -> bool:
    return point == number if isinstance(point, int) else f"tool:{point}" in unit.split()
