"""Erasing one user's data everywhere June keeps it (GDPR Art. 17): ``user_erase``, called by
``manage.py june erase-user`` and the admin's action (superusers). docs/privacy.md lists what
goes and what stays.

Their sessions (and their subagents' sessions) go with everything that hangs off them
(``erasure.session_delete``); then the rows about the user themselves: API tokens, limits
overrides, rate counters, unsent uploads; where they acted in someone else's session (an answer,
a reset, a branch, a turn they started as staff) the link to them is cleared, and their name
(a takeover's, an answer's) becomes "an operator (erased)" (``erasure.actor_forget``). The
audit log's rows of what they did as staff keep their name: the record of who read whose data
is what the log is for (GDPR Art. 17(3)(b)). The account row
is the site's: June leaves it (deactivate or delete it as the site does). A session under legal
hold is kept (GDPR Art. 17(3)(e)), and said so in the report. The audit log keeps the erasure,
naming the user only by ``subject_of``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable

from agents_app.models import Attachment
from sessions_app import audit, erasure, services
from sessions_app import models as m
from sessions_app.site_errors import UserBusy

#: what other installed apps keep about a user, erased with the rest: ``eraser(user_pk, counts)``
#: deletes it and counts it (the evals' cases made from the user's sessions: june_evals)
ERASERS: list[Callable[[Any, Counter], None]] = []


def user_erase(
    *,
    user: Any,
    cancel: bool = False,
    wait_seconds: float = 30.0,
    actor: Any = None,
    request: Any = None,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> dict[str, int]:
    """Delete ``user``'s data; returns what went, by kind. UserBusy while one of their turns is
    unfinished, unless ``cancel``: then the sessions holding them are reset first (which cancels
    them) and the erasure waits up to ``wait_seconds`` for the running ones to stop (UserBusy
    if one does not)."""
    owned = m.Session.objects.filter(owner=user)
    held = set(erasure.session_tree(owned.filter(legal_hold=True).values_list("pk", flat=True)))
    sessions = [s for s in erasure.session_tree(owned.values_list("pk", flat=True)) if s not in held]
    busy = list(erasure.unfinished_turns(sessions).values_list("pk", flat=True))
    if busy and not cancel:
        raise UserBusy(
            f"{len(busy)} turn(s) of this user are unfinished: cancel them first, or erase and cancel them "
            '(manage.py june erase-user --cancel; in the admin, "Cancel their unfinished turns first")'
        )
    # a reset settles a parked or queued turn at once and asks a running one to stop (the way
    # an operator ends a session's work; a cancel would refuse a turn waiting for an answer)
    for agent, key in m.Session.objects.filter(turns__pk__in=busy).values_list("agent", "key").distinct():
        services.session_reset(agent=agent, key=key)
    deadline = clock() + wait_seconds
    while erasure.unfinished_turns(sessions).exists():
        if clock() >= deadline:
            raise UserBusy("the user's cancelled turns have not stopped yet: try again")
        sleep(0.1)
    counts: Counter = Counter()
    counts["kept_on_legal_hold"] = len(held)
    for session_id in sessions:
        if not erasure.session_delete(session_id, counts=counts):
            raise UserBusy(f"session {session_id} started a turn during the erasure: try again")
    pk = user.pk
    for model, filters, label in (
        (m.ApiToken, {"user_id": pk}, "api_tokens"),
        (m.QuotaOverride, {"user_id": pk}, "limit_overrides"),
        (m.RateCounter, {"scope": "user", "subject": str(pk)}, "rate_counters"),
        (Attachment, {"owner_id": pk}, "attachments"),
    ):
        n, _ = model.objects.filter(**filters).delete()
        counts[label] += n
    erasure.actor_forget(pk, counts, email=str(getattr(user, "email", "") or ""))
    counts["links_cleared"] += m.Answer.objects.filter(user_id=pk).update(user=None, by="")
    counts["links_cleared"] += m.Turn.objects.filter(created_by_id=pk).update(created_by=None)
    counts["links_cleared"] += m.SessionReset.objects.filter(by_id=pk).update(by=None)
    counts["links_cleared"] += m.Branch.objects.filter(by_id=pk).update(by=None)
    for eraser in ERASERS:
        eraser(pk, counts)
    report = {k: v for k, v in sorted(counts.items()) if v}
    audit.audit_record(
        action=m.AuditAction.ERASE,
        user=actor,
        request=request,
        owner_id=pk,
        detail={"deleted": report, "cancelled": len(busy)},
    )
    return report
