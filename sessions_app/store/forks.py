"""Branches on the Django database (the rules: ``agents_app/runtime/branches.py``): fork and
switch, each one transaction under the session's row lock, like ``host_ops``'s operations.

A fork copies the live generation's messages before the fork point, and the events logged
before the opening of the turn there, into a new generation with the same positions and
sequence numbers (two ``INSERT … SELECT``, by the tables' keys): every read of the store keeps
reading one generation by its key, so nothing that loads a turn, replays a log or checks a step
learns about branches, and the processes' transcript caches stay sound (a generation number is
used once: ``Session.generation_seq``). The price is the copy: about the rows' own size per
message of the shared history (``bench/bench_branches.py`` prints it), written once per fork.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agents_app.runtime import branches, rules
from agents_app.runtime import events as ev
from agents_app.runtime.errors import NotFound
from agents_app.runtime.messages import Role
from agents_app.runtime.seams import Outcome, SessionRef, TurnInput
from sessions_app import models as m
from sessions_app.models.fields import event_type_code
from sessions_app.store import host_ops


@functools.cache
def _copy_sql(model: type[m.Message] | type[m.Event], last: str) -> str:
    """``INSERT … SELECT`` of one generation's rows before a position into another generation
    (events but those of ``branches.NOT_COPIED``)."""
    names = [connection.ops.quote_name(f.column) for f in model._meta.local_concrete_fields]
    picked = ["%s" if n == connection.ops.quote_name("generation") else n for n in names]
    table = model._meta.db_table
    return (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(picked)} FROM {table} "
        f"WHERE session_id = %s AND generation = %s AND {connection.ops.quote_name(last)} < %s{_skipped(model)}"
    )


def _skipped(model: type[m.Message] | type[m.Event]) -> str:
    if model is not m.Event:
        return ""
    codes = sorted(event_type_code(name) for name in branches.NOT_COPIED)
    return f" AND {connection.ops.quote_name('type')} NOT IN ({', '.join(str(c) for c in codes)})"


def _locked_txn(session: SessionRef) -> m.Session:
    found = m.Session.objects.filter(agent=session.agent, key=session.key).values_list("pk", flat=True).first()
    if found is None:
        raise NotFound(f"no session {session}")
    s = m.Session.objects.select_for_update().get(pk=found)
    branches.check_idle(busy=m.Turn.objects.filter(session=s, status__in=branches.BUSY).exists())
    return s


def _fork_point_txn(s: m.Session, *, at: int | None, regenerate: str | None) -> tuple[int, m.Turn | None]:
    """(position, the turn opened there) under the rules."""
    live = m.Message.objects.filter(session=s, generation=s.generation)
    if regenerate is not None:
        last = live.filter(role=Role.USER).order_by("-index").values_list("index", "turn_id").first()
        opener = m.Turn.objects.filter(pk=last[1], opening=last[0]).first() if last and last[1] else None
        branches.check_regenerable(turn_id=regenerate, last=opener.pk if opener else None)
        assert last is not None
        return last[0], opener
    assert at is not None
    row = live.filter(index=at).values_list("role", "turn_id").first()
    opener = m.Turn.objects.filter(pk=row[1], opening=at).first() if row and row[1] else None
    branches.check_fork_point(at=at, role=row[0] if row else None, opened_here=opener is not None)
    return at, opener


def _root_txn(s: m.Session) -> m.Branch:
    """The live generation's Branch row (its tree's root, made at its first fork), holding the
    compaction it is left with."""
    row, _ = m.Branch.objects.get_or_create(
        session=s, generation=s.generation, defaults={"parent_generation": None, "fork_index": 0}
    )
    m.Branch.objects.filter(pk=row.pk).update(boundary=s.boundary, summary_index=s.summary_index)
    return row


def fork(
    session: SessionRef,
    input: TurnInput | None,
    *,
    turn_id: str,
    at: int | None = None,
    regenerate: str | None = None,
    policy: dict[str, Any] | None = None,
    created_by: Any = None,
) -> Outcome:
    with transaction.atomic():
        s = _locked_txn(session)
        at, opener = _fork_point_txn(s, at=at, regenerate=regenerate)
        assert opener is not None
        rules.check_start(**host_ops.start_facts_txn(s, turn_id, parked=False))
        _root_txn(s)
        previous, generation = s.generation, s.generation_seq + 1
        cut = (
            m.Event.objects.filter(session=s, generation=previous, turn_id=opener.pk)
            .order_by("seq")
            .values_list("seq", flat=True)
            .first()
        )
        with connection.cursor() as cur:
            cur.execute(_copy_sql(m.Message, "index"), [generation, s.pk, previous, at])
            cur.execute(
                _copy_sql(m.Event, "seq"), [generation, s.pk, previous, cut if cut is not None else s.event_seq + 1]
            )
        summaries = m.Message.objects.filter(
            session=s, generation=previous, index__lt=at, role=Role.SUMMARY
        ).values_list("index", "data")
        boundary, summary = branches.fork_compaction(
            ((index, (data.get("boundary") or 0) if isinstance(data, dict) else 0) for index, data in summaries), at
        )
        m.Branch.objects.create(
            session=s,
            generation=generation,
            parent_generation=previous,
            fork_index=at,
            by=created_by if getattr(created_by, "pk", None) else None,
        )
        m.Session.objects.filter(pk=s.pk).update(
            generation=generation,
            generation_seq=generation,
            boundary=boundary,
            summary_index=summary,
            updated_at=timezone.now(),
        )
        logged = host_ops.log_txn(
            s.pk, [ev.BranchSwitched("", generation=generation, previous=previous, at=at)], turn_id=None
        )
        made = host_ops.create_turn(
            session, input or TurnInput.from_json(opener.input), turn_id=turn_id, policy=policy, created_by=created_by
        )
        return Outcome(events=logged + made.events, turn=made.turn, generation=generation)


def switch(session: SessionRef, generation: int) -> Outcome:
    with transaction.atomic():
        s = _locked_txn(session)
        if generation == s.generation:
            return Outcome(generation=generation)
        rows = {b.generation: b for b in m.Branch.objects.filter(session=s)}
        nodes = [branches.BranchNode(b.generation, b.parent_generation, b.fork_index) for b in rows.values()]
        if generation not in rows or generation not in branches.tree_of(nodes, s.generation):
            raise NotFound(f"no branch g{generation} of this conversation")
        _root_txn(s)  # the live one keeps its compaction for when it is switched back to
        target = rows[generation]
        m.Session.objects.filter(pk=s.pk).update(
            generation=generation, boundary=target.boundary, summary_index=target.summary_index
        )
        host_ops.session_status_txn(s.pk)
        logged = host_ops.log_txn(
            s.pk, [ev.BranchSwitched("", generation=generation, previous=s.generation)], turn_id=None
        )
        return Outcome(events=logged, generation=generation)
