"""Writing notification rows: a park's (once per park; ``key`` is unique), its reminder, and
failures (held, then folded into one digest per ``JUNE_NOTIFY_DIGEST_SECONDS``).

The park sweep reads the parked turns instead of hooking the store's hot path: a turn is never
blocked or slowed by its notification."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from agents_app.runtime.notify import destination
from sessions_app import listings, services, wiring
from sessions_app import models as m
from sessions_app.notify import text
from sessions_app.notify.options import NotifyConfig, config

N = m.Notification
S = m.NotificationState


def card_link(turn_id: str, cfg: NotifyConfig) -> str:
    return cfg.base_url + reverse("admin:sessions_app_approvalrequest_change", args=(turn_id,))


def answerers_of(turn: m.Turn) -> list[str]:
    """E-mail addresses of the active staff users who may answer the turn's request now
    (``services.may_answer``: the agent's own grant rule), sorted."""
    users = get_user_model().objects.filter(is_active=True, is_staff=True).exclude(email="")
    return sorted({u.email for u in users if services.may_answer(turn=turn, user=u)})


def _add(key: str, **fields: Any) -> bool:
    try:
        with transaction.atomic():
            N.objects.create(key=key, next_at=timezone.now(), **fields)
        return True
    except IntegrityError:
        return False  # written already: once per park


def _park_rows(turn: m.Turn, kind: str, cfg: NotifyConfig) -> int:
    request = (turn.pending or {}).get("request") or {}
    input_id = str(request.get("id") or "")
    prompt = str(request.get("prompt") or request.get("title") or "")[:2000]  # the user's words, often
    link = card_link(turn.pk, cfg)
    what = "Reminder: an answer is still needed" if kind == "reminder" else "An answer is needed"
    subject = f"[June] {what}: {turn.session.agent}"[:300]

    def body(channel: str) -> str:
        return f"The request:\n{text.quoted(prompt, channel)}\n\nAnswer it in the inbox: {link}\n"

    ref = f"{kind}:{turn.pk}:{turn.generation}:{input_id}"
    made = 0
    # the agent's ``notify`` (and its answering policy's) over the site's settings
    dest = destination(wiring.agent(turn.session.agent).notify, (request.get("answerers") or {}).get("policy"))
    email, url = dest.get("email", cfg.email), dest.get("webhook_url", cfg.webhook_url)
    if email:
        to = answerers_of(turn)
        if to:
            made += _add(
                f"{ref}:email",
                kind=kind,
                channel="email",
                turn_id=turn.pk,
                input_id=input_id,
                recipients=to,
                subject=subject,
                body=body("email"),
            )
    if url:
        made += _add(
            f"{ref}:webhook",
            kind=kind,
            channel="webhook",
            turn_id=turn.pk,
            input_id=input_id,
            recipients=[url],
            subject=text.for_channel(subject, text.WEBHOOK),
            body=body(text.WEBHOOK),
        )
    return made


def notify_parks(*, now: dt.datetime | None = None) -> int:
    """Rows for every request parked for an answer not notified yet, and reminders for those
    notified ``remind_after`` ago and still unanswered. Returns the rows written."""
    cfg = config()
    now = now or timezone.now()
    made = 0
    parked = (
        m.Turn.objects.filter(status=m.TurnStatus.SUSPENDED, waiting=0, pending__isnull=False)
        .exclude(source=listings.EVAL_SOURCE)  # an eval's requests wait for no person
        .select_related("session")
    )
    cap = settings.JUNE_NOTIFY_PARKS_PER_USER_HOUR
    sent = _parks_notified_per_owner(now - dt.timedelta(hours=1)) if cap > 0 else {}
    for turn in parked:
        if not ((turn.pending or {}).get("request") or {}).get("id"):
            continue
        owner = turn.session.owner_id
        if cap > 0 and owner is not None and sent.get(owner, 0) >= cap:
            continue  # this user's requests wait in the inbox; notified as the hour frees up
        input_id = str(turn.pending["request"]["id"])
        first = N.objects.filter(kind="park", turn_id=turn.pk, input_id=input_id).order_by("created_at").first()
        rows = 0
        if first is None:
            rows = _park_rows(turn, "park", cfg)
        elif cfg.remind_after > 0 and first.created_at <= now - dt.timedelta(seconds=cfg.remind_after):
            rows = _park_rows(turn, "reminder", cfg)
        if rows and owner is not None:
            sent[owner] = sent.get(owner, 0) + 1
        made += rows
    return made


def _parks_notified_per_owner(since: dt.datetime) -> dict[Any, int]:
    """How many parks (and reminders) of each user's turns were notified since ``since``: one
    per request, whatever the number of channels it went to."""
    refs = {
        (turn_id, key.rsplit(":", 1)[0])
        for key, turn_id in N.objects.filter(kind__in=("park", "reminder"), created_at__gte=since).values_list(
            "key", "turn_id"
        )
    }
    owners = dict(m.Turn.objects.filter(pk__in={t for t, _ in refs}).values_list("pk", "session__owner_id").iterator())
    counts: dict[Any, int] = {}
    for turn_id, _ in refs:
        owner = owners.get(turn_id)
        if owner is not None:
            counts[owner] = counts.get(owner, 0) + 1
    return counts


def notify_failure(what: str, detail: str, *, key: str | None = None) -> bool:
    """A failure (a turn failed, a schedule failing, a delivery given up, a worker gone):
    held until the next digest. ``key`` makes it once only (False: held or sent already)."""
    key = key or f"failure:{timezone.now().timestamp()}:{id(detail)}"
    return _add(key[:300], kind="failure", channel="", subject=what[:300], body=detail[:4000], state=S.HELD)


def fold_digest(*, now: dt.datetime | None = None) -> int:
    """Held failures into one digest row per channel, at most once per ``digest_every``:
    to the active superusers' e-mail and the webhook. Returns the failures folded."""
    cfg = config()
    now = now or timezone.now()
    last = N.objects.filter(kind="digest").order_by("-created_at").values_list("created_at", flat=True).first()
    if last and last > now - dt.timedelta(seconds=cfg.digest_every):
        return 0
    with transaction.atomic():
        held = list(N.objects.select_for_update().filter(state=S.HELD, kind="failure").order_by("pk")[:1000])
        if not held:
            return 0
        lines = [f"- {h.created_at:%Y-%m-%d %H:%M:%S} {h.subject}: {h.body[:300]}" for h in held]
        subject = f"[June] {len(held)} failure(s)"
        body = "\n".join(lines) + "\n"  # failures quote errors, which can quote anyone's text
        ref = f"digest:{now.timestamp()}:{held[0].pk}"
        admins = sorted(
            set(
                get_user_model()
                .objects.filter(is_active=True, is_superuser=True)
                .exclude(email="")
                .values_list("email", flat=True)
            )
        )
        if cfg.email and admins:
            _add(f"{ref}:email", kind="digest", channel="email", recipients=admins, subject=subject, body=body)
        if cfg.webhook_url:
            _add(
                f"{ref}:webhook",
                kind="digest",
                channel="webhook",
                recipients=[cfg.webhook_url],
                subject=subject,
                body=text.for_channel(body, text.WEBHOOK),
            )
        N.objects.filter(pk__in=[h.pk for h in held]).update(state=S.SENT, updated_at=now)
    return len(held)
