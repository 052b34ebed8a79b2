"""Notifications: the people who may answer a parked request are told, by email (Django's email
backend) and/or a chat webhook (a body Slack and Teams incoming webhooks accept: ``{"text": …}``),
with a link to the card in the admin inbox. Once per park and recipient, never for a request
already answered, and a reminder after ``JUNE_NOTIFY_REMIND_AFTER`` seconds.

Durable and off the turn's path: every worker's watchdog (``workers.sweeper``) calls ``tick``:
``plan`` writes a ``Notification`` row per parked request and recipient (its ``key`` is unique:
a second pass, or a second worker, writes nothing twice), ``send_due`` sends the rows that are
due, re-checking that the request still waits, and retries a failure with backoff
(``attempts``, ``next_attempt_at``) until ``JUNE_NOTIFY_MAX_ATTEMPTS``. The admin lists the rows.

Recipients: a request for one user (``{"user": id}``) goes to that user; a policy request
(``{"policy": …}``) to every active staff member the agent's ``authorize_answer`` grants it
(as the inbox lists it); an unrestricted one to the session's owner. Email goes to those with an
address; the webhook is the agent's (``settings = {"notify_webhook": URL}`` in agent.py) or
``JUNE_NOTIFY_WEBHOOK``."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from sessions_app import models as m
from sessions_app import services, wiring

log = logging.getLogger(__name__)
N = m.Notification
#: parked turns looked at per pass, rows sent per pass, staff members asked per policy request
PLAN_BATCH, SEND_BATCH, MAX_CANDIDATES = 200, 50, 500
WEBHOOK_TIMEOUT = 5.0


#: seconds between a process's passes (the watchdog runs every JUNE_SWEEP_SECONDS)
PERIOD = 5.0
_last_pass = 0.0


def tick(now: Any = None, *, force: bool = False) -> dict[str, int]:
    """A pass: plan, then send what is due; at most every ``PERIOD`` seconds per process."""
    global _last_pass
    clock = time.monotonic()
    if not settings.JUNE_NOTIFY or (not force and clock - _last_pass < PERIOD):
        return {}
    _last_pass = clock
    now = now or timezone.now()
    return {"planned": plan(now), **send_due(now)}


# -- planning -----------------------------------------------------------------------------------------

def plan(now: Any) -> int:
    written = 0
    parked = (m.Turn.objects.filter(status="suspended", waiting=0).exclude(pending=None)
              .select_related("session").order_by("updated_at")[:PLAN_BATCH])
    remind = settings.JUNE_NOTIFY_REMIND_AFTER
    for turn in parked:
        request = (turn.pending or {}).get("request") or {}
        input_id = str(request.get("id") or "")
        if not input_id:
            continue
        parks = list(N.objects.filter(turn=turn, input_id=input_id, kind="park").values_list("state", "sent_at"))
        sent = min((at for state, at in parks if state == N.State.SENT and at), default=None)
        reminder_due = (remind > 0 and sent is not None and now - sent >= timedelta(seconds=remind)
                        and not N.objects.filter(turn=turn, input_id=input_id, kind="reminder").exists())
        if parks and not reminder_due:
            continue  # told already (a reminder goes only after a park notice that was sent)
        targets = [("email", address) for address in recipients(turn)]
        webhook = _webhook(turn)
        if webhook:
            targets.append(("webhook", webhook))
        for channel, to in targets:
            written += _write(turn, input_id, "reminder" if reminder_due else "park", channel, to, now)
    return written


def recipients(turn: m.Turn) -> list[str]:
    """The addresses of the people who may answer the turn's parked request."""
    answerers = ((turn.pending or {}).get("request") or {}).get("answerers") or {}
    users = get_user_model().objects.filter(is_active=True)
    if "user" in answerers:
        people = list(users.filter(pk=answerers["user"])) if str(answerers["user"]).isdigit() else []
    elif "policy" in answerers:
        people = [u for u in users.filter(is_staff=True).order_by("pk")[:MAX_CANDIDATES]
                  if services.may_answer(turn=turn, user=u)]
    else:
        people = [turn.session.owner] if turn.session.owner_id else []
    return sorted({u.email for u in people if getattr(u, "email", "")})


def _webhook(turn: m.Turn) -> str:
    try:
        own = (wiring.agent(turn.session.agent).settings or {}).get("notify_webhook")
    except Exception:  # an agent no longer installed
        own = None
    return str(own or settings.JUNE_NOTIFY_WEBHOOK or "")


def _key(kind: str, turn: m.Turn, input_id: str, channel: str, to: str) -> str:
    return f"{kind}:{turn.pk}:{input_id}:{channel}:{to}"[:300]


def _write(turn: m.Turn, input_id: str, kind: str, channel: str, to: str, now: Any) -> int:
    key = _key(kind, turn, input_id, channel, to)
    if N.objects.filter(key=key).exists():
        return 0
    subject, body = _message(turn, kind)
    try:
        with transaction.atomic():
            N.objects.create(key=key, kind=kind, channel=channel, recipient=to, turn=turn, input_id=input_id,
                             subject=subject, body=body, next_attempt_at=now)
    except IntegrityError:  # another worker's pass wrote it first
        return 0
    return 1


def _message(turn: m.Turn, kind: str) -> tuple[str, str]:
    request = (turn.pending or {}).get("request") or {}
    prompt = str(request.get("prompt") or "An agent asks for an answer")[:200]
    what = f"{turn.session.agent} / {turn.session.key}"
    link = _card_url(turn)
    subject = ("Reminder: " if kind == "reminder" else "") + f"Approval needed: {prompt}"
    lines = [f"{prompt}", "", f"Session: {what}", f"Turn: {turn.pk}"]
    if request.get("kind") == "tool_approval":
        lines.append(f"Tool: {request.get('tool')} {json.dumps(request.get('input'), sort_keys=True)[:500]}")
    lines += ["", f"Answer it in the approval inbox: {link}"]
    return subject[:300], "\n".join(lines)


def _card_url(turn: m.Turn) -> str:
    try:
        path = reverse("admin:sessions_app_approvalrequest_change", args=[turn.pk])
    except NoReverseMatch:
        path = ""
    return settings.JUNE_SITE_URL.rstrip("/") + path


# -- sending ------------------------------------------------------------------------------------------------

def send_due(now: Any) -> dict[str, int]:
    counts = {"sent": 0, "skipped": 0, "retried": 0, "failed": 0}
    due = list(N.objects.filter(state=N.State.PENDING, next_attempt_at__lte=now).order_by("next_attempt_at")
               [:SEND_BATCH])
    for row in due:
        if not _still_waiting(row):
            N.objects.filter(pk=row.pk, state=N.State.PENDING).update(state=N.State.SKIPPED)
            counts["skipped"] += 1
            continue
        try:
            _deliver(row)
        except Exception as exc:  # noqa: BLE001 (a receiver down, a refused address: retried)
            attempts = row.attempts + 1
            gave_up = attempts >= settings.JUNE_NOTIFY_MAX_ATTEMPTS
            N.objects.filter(pk=row.pk, state=N.State.PENDING).update(
                attempts=attempts, last_error=f"{type(exc).__name__}: {exc}"[:2000],
                state=N.State.FAILED if gave_up else N.State.PENDING,
                next_attempt_at=now + timedelta(seconds=min(5 * 2 ** attempts, 3600)))
            counts["failed" if gave_up else "retried"] += 1
            log.warning("notification %s to %s: attempt %d failed: %s", row.pk, row.recipient, attempts, exc)
            continue
        N.objects.filter(pk=row.pk).update(state=N.State.SENT, sent_at=timezone.now(), attempts=row.attempts + 1)
        counts["sent"] += 1
    return counts


def _still_waiting(row: m.Notification) -> bool:
    if row.turn_id is None:
        return False
    turn = m.Turn.objects.filter(pk=row.turn_id).values("status", "pending").first()
    request = ((turn or {}).get("pending") or {}).get("request") or {}
    return bool(turn) and turn["status"] == "suspended" and str(request.get("id")) == row.input_id


def _deliver(row: m.Notification) -> None:
    if row.channel == "email":
        send_mail(row.subject, row.body, settings.JUNE_NOTIFY_FROM or None, [row.recipient], fail_silently=False)
        return
    data = json.dumps({"text": f"*{row.subject}*\n{row.body}"}).encode()
    request = urllib.request.Request(row.recipient, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:  # noqa: S310 (an operator's URL)
        if not 200 <= response.status < 300:
            raise RuntimeError(f"webhook answered {response.status}")
