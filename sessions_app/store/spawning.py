"""Subagents on the Django database: creating a parent's children in the unit that parks it,
and the cascade of a cancel down the tree (lock order: ``child_reports``)."""

from __future__ import annotations

from django.db import connection
from django.db.models import F
from django.utils import timezone

from agents_app.runtime import events as ev
from agents_app.runtime import rules, subagents
from agents_app.runtime.errors import ChildSessionRefused
from agents_app.runtime.seams import FINAL_STATUSES, ChildTurn, SessionRef, TurnStatus
from sessions_app import models as m
from sessions_app.store import checkpoint, checkpoint_plain

dumps = checkpoint.dumps
FINAL = sorted(str(s) for s in FINAL_STATUSES)


def create_txn(parent_id: str, children: list[ChildTurn]) -> list[tuple[str, SessionRef]]:
    """Create the queued children (and their sessions, owned by the parent session's owner)
    and count them on the parent; a child id that exists is left alone. Inside the spawning
    unit's transaction, before its fence (which rolls all of it back for a stale attempt)."""
    parent = m.Turn.objects.select_related("session").get(pk=parent_id)
    # the lock order: the parent's session row before any turn row (then the children's
    # sessions and turns, then the parent's turn: its ``waiting`` here, its fence next)
    list(m.Session.objects.select_for_update(no_key=True).filter(pk=parent.session_id).values_list("pk"))
    created: list[tuple[str, SessionRef]] = []
    for child in children:
        if m.Turn.objects.filter(pk=child.turn_id).exists():
            continue
        s, _ = m.Session.objects.get_or_create(
            agent=child.session.agent, key=child.session.key, defaults={"owner_id": parent.session.owner_id}
        )
        s = m.Session.objects.select_for_update().get(pk=s.pk)
        if s.owner_id != parent.session.owner_id or not child.session.key.startswith(subagents.SESSION_PREFIX):
            # a child runs only in its parent owner's child session: never in one another user
            # made (users cannot create the namespace; this holds for sessions made before)
            raise ChildSessionRefused(
                f"the child session {child.session.agent}/{child.session.key} exists and belongs to another user"
            )
        m.Session.objects.filter(pk=s.pk).update(turn_seq=F("turn_seq") + 1)
        m.Turn.objects.create(
            id=child.turn_id,
            session=s,
            order=s.turn_seq + 1,
            generation=s.generation,
            status=TurnStatus.QUEUED,
            kind=child.input.kind,
            source=child.input.source or "",
            input=child.input.to_json(),
            policy=child.policy,
            created_by_id=parent.created_by_id,
            parent_id=parent_id,
            spawn_step=child.step,
            depth=child.depth,
        )
        _session_status(s.pk)
        created.append((child.turn_id, child.session))
    if created:
        m.Turn.objects.filter(pk=parent_id).update(waiting=F("waiting") + len(created))
    return created


def cascade_txn(turn_ids: list[str]) -> list[str]:
    """``rules.CASCADE`` to every unfinished descendant of ``turn_ids``, deepest first: parked
    and queued ones are cancelled at once (logged in their sessions), running ones get the
    request. Returns those, to ring."""
    levels: list[list[str]] = []
    ids = list(turn_ids)
    while ids:
        ids = list(m.Turn.objects.filter(parent_id__in=ids).exclude(status__in=FINAL).values_list("id", flat=True))
        if ids:
            levels.append(ids)
    now_cancel = sorted(str(st) for st in TurnStatus if rules.cancel_now(st, reason=rules.CASCADE))
    requested = sorted(str(st) for st in rules.CANCEL_REQUESTED)
    reason = str(rules.CASCADE)
    rung: list[str] = []
    for level in reversed(levels):
        marks = ", ".join(["%s"] * len(level))
        # the lock order: each child's session row before its turn's (as its checkpoint takes them)
        sessions = m.Turn.objects.filter(id__in=level).values("session_id")
        list(m.Session.objects.select_for_update().filter(pk__in=sessions).order_by("pk").values_list("pk"))
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE sessions_app_turn SET status = %s, cancel_reason = %s, error = %s, pending = NULL, waiting = 0, "
                "ended_at = %s "
                f"WHERE id IN ({marks}) AND status IN ({', '.join(['%s'] * len(now_cancel))}) RETURNING id, session_id",
                [
                    str(TurnStatus.CANCELLED),
                    reason,
                    dumps({"reason": reason}),
                    checkpoint.plain_now(),
                    *level,
                    *now_cancel,
                ],
            )
            cancelled = cur.fetchall()
            cur.execute(
                "UPDATE sessions_app_turn SET cancel_reason = %s "
                f"WHERE id IN ({marks}) AND status IN ({', '.join(['%s'] * len(requested))}) "
                "AND cancel_reason IS NULL RETURNING id",
                [reason, *level, *requested],
            )
            rung += [row[0] for row in cur.fetchall()]
        by_session: dict[int, list[ev.TurnEvent]] = {}
        for turn_id, session_id in cancelled:
            by_session.setdefault(session_id, []).append(ev.TurnCancelled(turn_id, reason=reason))
        for session_id, events in by_session.items():
            checkpoint_plain.log_events(session_id, events, turn_id=None)
            _session_status(session_id)
    return rung


def _session_status(session_id: int) -> None:
    with connection.cursor() as cur:
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        cur.execute(checkpoint.session_status_sql(by_turn=False), checkpoint.session_status_params(session_id, now))


def candidates_txn(session_id: int, reason: str) -> list[str]:
    """The turns of a session a cancel with ``reason`` will cancel or hand a request: whose
    children the cascade reaches first."""
    rows = (
        m.Turn.objects.filter(session_id=session_id)
        .exclude(status__in=FINAL)
        .values_list("id", "status", "waiting", "cancel_reason")
    )
    return [
        turn_id
        for turn_id, status, waiting, cancel_reason in rows
        if rules.cancel_now(TurnStatus(status), reason=reason, waiting=waiting)
        or (TurnStatus(status) in rules.CANCEL_REQUESTED and not cancel_reason)
    ]
