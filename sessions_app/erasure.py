"""Deleting sessions everywhere June keeps them (retention, erasure), and erasing one user's
data (``user_erase``: ``manage.py june erase-user``, the admin's action).

A session goes in bounded steps, none holding a lock a turn needs: first one conditional UPDATE
takes it out of reach (its key becomes ``~erasing:<id>``, a key no transport accepts, and its
old key moves to its title, only if it has no unfinished turn and
whatever else the caller asks, e.g. "still idle since the cutoff"), so no message can reach it
again (a new message with its old key makes a new session); then what hangs off it is deleted in
chunks of ``CHUNK`` rows, each chunk its own short transaction: its subagents' sessions, the
notifications and webhook/schedule rows about its turns, its attachments (files after the
commit), events, messages, steps, answers, django-q2's task rows about its turns, turns,
branches, resets, and the session row last.
A deletion cut short (a crash) leaves a session under its ``~erasing:`` key, which the next pass
(``sessions_resume_deleting``) finishes.

Tables of the site's own tools hear of it through ``turns_forgotten`` (``agents_app.forget``).
``actor_forget`` erases a staff member's name where they acted in other users' sessions.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from agents_app.forget import turns_forgotten
from agents_app.models import Attachment, ScheduleRun, WebhookDelivery
from sessions_app import models as m
from sessions_app.outbox.queue import tasks_forget

log = logging.getLogger(__name__)

#: rows deleted per statement (each its own transaction)
CHUNK = 500
#: the key of a session being deleted (out of every transport's reach: not a valid session key)
DELETING = "~erasing:"


def _chunks(values: list[Any], size: int = CHUNK) -> Iterable[list[Any]]:
    for at in range(0, len(values), size):
        yield values[at : at + size]


def session_tree(session_ids: Iterable[int]) -> list[int]:
    """The sessions and, transitively, the sessions of their turns' subagents."""
    found = set(session_ids)
    frontier = set(found)
    while frontier:
        turns = list(m.Turn.objects.filter(session_id__in=frontier).values_list("pk", flat=True))
        children: set[int] = set()
        for part in _chunks(turns):
            children.update(m.Turn.objects.filter(parent_id__in=part).values_list("session_id", flat=True))
        frontier = children - found
        found |= frontier
    return sorted(found)


def unfinished_turns(session_ids: Iterable[int]) -> m.QuerySet:
    return m.Turn.objects.filter(session_id__in=list(session_ids), status__in=m.CHAIN_BLOCKING)


def session_claim(session_id: int, *, only_if: Q | None = None) -> tuple[str, str] | None:
    """Take the session out of reach for its deletion: (agent, its key before) if it had no
    unfinished turn and met ``only_if``; None (untouched) otherwise."""
    with transaction.atomic():
        row = m.Session.objects.filter(pk=session_id).values_list("agent", "key", "title").first()
        if row is None:
            return None
        agent, key, title = row
        if key.startswith(DELETING):
            return agent, title  # a deletion cut short: finish it
        busy = m.Turn.objects.filter(session_id=OuterRef("pk"), status__in=m.CHAIN_BLOCKING)
        claimed = (
            m.Session.objects.filter(only_if or Q(), pk=session_id, key=key)
            .exclude(Exists(busy))
            .update(key=f"{DELETING}{session_id}", title=key)
        )
    return (agent, key) if claimed else None


def _delete_keyed(model: Any, session_id: int, column: str, counts: Counter, label: str) -> None:
    """Delete a session's rows of a table keyed (session, generation, ``column``), CHUNK at a time."""
    while True:
        keys = list(
            model.objects.filter(session_id=session_id)
            .order_by("generation", column)
            .values_list("generation", column)[:CHUNK]
        )
        if not keys:
            return
        generation = keys[0][0]
        last = max(k[1] for k in keys if k[0] == generation)
        n, _ = model.objects.filter(session_id=session_id, generation=generation, **{f"{column}__lte": last}).delete()
        counts[label] += n


def _delete_in(queryset_of: Any, values: list[Any], counts: Counter, label: str) -> None:
    for part in _chunks(values):
        n, _ = queryset_of(part).delete()
        counts[label] += n


def _turns_delete(agent: str, turns: list[str], counts: Counter) -> None:
    """Delete turns, CHUNK at a time, adding what each spent to its agent's day first
    (``UsageTotal``), in the same transaction: the site's totals stay, linked to nothing."""
    for part in _chunks(turns):
        with transaction.atomic():
            _usage_keep_txn(
                [
                    (agent, at.date(), usage)
                    for at, usage in m.Turn.objects.filter(pk__in=part).values_list("created_at", "usage")
                ]
            )
            n, _ = m.Turn.objects.filter(pk__in=part).delete()
        counts["turns"] += n


def _usage_keep_txn(rows: list[tuple[str, Any, dict[str, Any] | None]]) -> None:
    """Add (agent, day, usage) of turns about to be deleted to their days' totals."""
    folded: dict[tuple[str, Any], tuple[int, dict[str, float]]] = {}
    for agent, day, usage in rows:
        n, sums = folded.get((agent, day), (0, {}))
        for key, value in (usage or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                sums[key] = sums.get(key, 0) + value
        folded[(agent, day)] = (n + 1, sums)
    for (agent, day), (n, sums) in folded.items():
        row, _ = m.UsageTotal.objects.select_for_update().get_or_create(agent=agent, day=day)
        merged = dict(row.usage or {})
        for key, value in sums.items():
            merged[key] = merged.get(key, 0) + value
        m.UsageTotal.objects.filter(pk=row.pk).update(turns=row.turns + n, usage=merged)


def generation_delete(session_id: int, generation: int, *, counts: Counter) -> bool:
    """Delete one archived generation of a session (a reset's archive, a branch not live): its
    turns, messages, events, steps, answers, their uploads and notifications, its Branch and
    reset rows. False, touching nothing, when it is the live one or the session is under legal
    hold. First, under the session's lock for one short transaction, its Branch row goes, so
    nobody can switch to it while its rows go."""
    with transaction.atomic():
        row = (
            m.Session.objects.select_for_update()
            .filter(pk=session_id)
            .values_list("agent", "key", "generation", "legal_hold")
            .first()
        )
        if row is None or row[2] == generation or row[3]:
            return False
        if unfinished_turns([session_id]).filter(generation=generation).exists():
            return False
        agent, key = row[0], row[1]
        counts["branches"] += m.Branch.objects.filter(session_id=session_id, generation=generation).delete()[0]
    turns = list(m.Turn.objects.filter(session_id=session_id, generation=generation).values_list("pk", flat=True))
    turns_forgotten.send(sender=m.Session, agent=agent, session_key=key, turn_ids=turns)
    _delete_in(lambda part: m.Notification.objects.filter(turn_id__in=part), turns, counts, "notifications")
    sent = turns + [  # and the files its user sent while a person answered
        m.takeover_files_mark(pk)
        for pk in m.Takeover.objects.filter(session_id=session_id, generation=generation).values_list("pk", flat=True)
    ]
    _delete_in(lambda part: Attachment.objects.filter(turn_id__in=part), sent, counts, "attachments")
    for model, column, label in ((m.Event, "seq", "events"), (m.Message, "index", "messages")):
        while True:
            last = list(
                model.objects.filter(session_id=session_id, generation=generation)
                .order_by(column)
                .values_list(column, flat=True)[CHUNK - 1 : CHUNK]
            )
            scope = model.objects.filter(session_id=session_id, generation=generation)
            n, _ = (scope.filter(**{f"{column}__lte": last[0]}) if last else scope).delete()
            counts[label] += n
            if not last:
                break
    _delete_in(lambda part: m.Step.objects.filter(turn_id__in=part), turns, counts, "steps")
    _delete_in(lambda part: m.Answer.objects.filter(turn_id__in=part), turns, counts, "answers")
    counts["task_rows"] += tasks_forget(turns)
    _turns_delete(agent, turns, counts)
    counts["resets"] += m.SessionReset.objects.filter(session_id=session_id, generation=generation).delete()[0]
    counts["generations"] += 1
    return True


def session_delete(session_id: int, *, counts: Counter, only_if: Q | None = None) -> bool:
    """Delete one session (and its subagents' sessions) everywhere; False, touching nothing, if
    it has an unfinished turn or fails ``only_if`` (True if it is gone already). Adds what went
    to ``counts``."""
    claimed = session_claim(session_id, only_if=only_if)
    if claimed is None:
        return not m.Session.objects.filter(pk=session_id).exists()
    agent, key = claimed
    for child in session_tree([session_id]):
        if child != session_id and not session_delete(child, counts=counts):
            log.warning("session %s: its subagent session %s is busy; deleted with its parent later", session_id, child)
    turns = list(m.Turn.objects.filter(session_id=session_id).values_list("pk", flat=True))
    turns_forgotten.send(sender=m.Session, agent=agent, session_key=key, turn_ids=turns)
    _delete_in(lambda part: m.Notification.objects.filter(turn_id__in=part), turns, counts, "notifications")
    for model, label in ((ScheduleRun, "schedule_runs"), (WebhookDelivery, "webhook_deliveries")):
        n, _ = model.objects.filter(agent=agent, session_key=key).delete()
        counts[label] += n
    attachments = list(Attachment.objects.filter(agent=agent, session_key=key).values_list("pk", flat=True))
    _delete_in(lambda part: Attachment.objects.filter(pk__in=part), attachments, counts, "attachments")
    _delete_keyed(m.Event, session_id, "seq", counts, "events")
    _delete_keyed(m.Message, session_id, "index", counts, "messages")
    _delete_in(lambda part: m.Step.objects.filter(turn_id__in=part), turns, counts, "steps")
    _delete_in(lambda part: m.Answer.objects.filter(turn_id__in=part), turns, counts, "answers")
    counts["task_rows"] += tasks_forget(turns)
    _turns_delete(agent, turns, counts)
    for model, label in ((m.Branch, "branches"), (m.SessionReset, "resets")):
        n, _ = model.objects.filter(session_id=session_id).delete()
        counts[label] += n
    n, _ = m.Session.objects.filter(pk=session_id).delete()
    counts["sessions"] += n
    return True


def sessions_resume_deleting(*, counts: Counter) -> int:
    """Finish the deletions a crash cut short (sessions left under their ``~erasing:`` key)."""
    done = 0
    for session_id in m.Session.objects.filter(key__startswith=DELETING).values_list("pk", flat=True):
        done += session_delete(session_id, counts=counts)
    return done


# -- a staff member's name in other users' sessions ----------------------------------------------------

#: the events that name a takeover's operator (``by``: their display name)
TAKEOVER_EVENTS = ("takeover.started", "takeover.ended", "person.message")


def _rewrite(rows: Iterable[tuple[Any, Any]], change: Any, update: Any) -> int:
    """``update(pk, new)`` for each (pk, data: a dict or a list) whose ``change(data)`` is not
    None; how many."""
    n = 0
    for pk, data in rows:
        new = change(data) if isinstance(data, dict | list) and data else None
        if new is not None:
            update(pk, new)
            n += 1
    return n


def _renamed(data: dict[str, Any], names: set[str]) -> dict[str, Any] | None:
    """A takeover's event or transcript entry with the operator's name replaced, or None."""
    by = str(data.get("by") or "")
    if by in names:
        return {**data, "by": m.ERASED_NAME}
    if by.startswith(m.PERSON_PREFIX) and by.removeprefix(m.PERSON_PREFIX) in names:
        return {**data, "by": m.PERSON_PREFIX + m.ERASED_NAME}
    text = str(data.get("text") or "")
    if by == m.NOTE_BY and any(name in text for name in names):
        for name in sorted(names, key=len, reverse=True):
            text = text.replace(name, m.ERASED_NAME)
        return {**data, "text": text}
    return None


def actor_forget(user_pk: Any, counts: Counter, *, email: str = "") -> None:
    """Where a (staff) user acted in other users' sessions, their name and id go: a takeover's
    rows, events and transcript entries name ``m.ERASED_NAME`` instead ("an operator (erased)"),
    an answer's event and journal no longer say who; notifications no longer list their address.
    The rows stay: the other users' conversations read the same, by someone unnamed."""
    uid = str(user_pk)
    takeovers = m.Takeover.objects.filter(operator_id=user_pk)
    names = set(takeovers.values_list("operator_name", flat=True)) - {"", m.ERASED_NAME}
    sessions = sorted(set(takeovers.values_list("session_id", flat=True)))
    counts["links_cleared"] += takeovers.update(operator=None, operator_name=m.ERASED_NAME)
    if names:
        for part in _chunks(sessions):
            counts["names_erased"] += _rewrite(
                m.Event.objects.filter(session_id__in=part, type__in=TAKEOVER_EVENTS).values_list("pk", "data"),
                lambda d: _renamed(d, names),
                lambda pk, new: m.Event.objects.filter(pk=pk).update(data=new),
            )
            counts["names_erased"] += _rewrite(
                m.Message.objects.filter(session_id__in=part, turn_id__isnull=True).values_list("pk", "data"),
                lambda d: _renamed(d, names),
                lambda pk, new: m.Message.objects.filter(pk=pk).update(data=new),
            )
    answered = sorted(set(m.Answer.objects.filter(Q(user_id=user_pk) | Q(by=uid)).values_list("turn_id", flat=True)))
    for part in _chunks(answered):
        counts["names_erased"] += _rewrite(
            m.Event.objects.filter(turn_id__in=part, type="input.answered").values_list("pk", "data"),
            lambda d: {**d, "by": None, "name": m.ERASED_NAME} if str(d.get("by")) == uid else None,
            lambda pk, new: m.Event.objects.filter(pk=pk).update(data=new),
        )
        counts["names_erased"] += _rewrite(
            m.Turn.objects.filter(pk__in=part).values_list("pk", "journal"),
            lambda j: (
                {**j, "answered": {**j["answered"], "by": None}}
                if str((j.get("answered") or {}).get("by")) == uid
                else None
            ),
            lambda pk, new: m.Turn.objects.filter(pk=pk).update(journal=new),
        )
    counts["names_erased"] += _rewrite(
        m.Turn.objects.filter(created_by_id=user_pk).values_list("pk", "input"),
        lambda i: (
            {**i, "user": {**i["user"], "id": "", "name": m.ERASED_NAME}}
            if isinstance(i.get("user"), dict) and str(i["user"].get("id")) == uid
            else None
        ),
        lambda pk, new: m.Turn.objects.filter(pk=pk).update(input=new),
    )
    if email:
        counts["names_erased"] += _rewrite(
            m.Notification.objects.filter(recipients__icontains=email).values_list("pk", "recipients"),
            lambda r: [a for a in r if str(a).lower() != email.lower()] if email.lower() in map(str.lower, r) else None,
            lambda pk, new: m.Notification.objects.filter(pk=pk).update(recipients=new),
        )
