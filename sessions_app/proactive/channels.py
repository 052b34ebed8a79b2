"""The site's channels: where turns come from (a ``source`` no user can forge) and how their
results are delivered.

- ``web``      the chat UI; the logged-in user is attested (the websocket consumer).
- ``http``     the API; the token's (or cookie's) user is attested (the API views).
- ``webhook``  ``POST /api/agents/<agent>/webhook``; attested only with a valid HMAC signature
               (``JUNE_WEBHOOK_SECRET_<AGENT>``); results are POSTed, signed, to the agent's
               configured URL, retried with backoff (``WebhookDelivery`` rows, in the admin).
- ``schedule`` proactive turns of ``sessions_app.proactive.schedules``; delivered to the session's chat.
- ``cli``      ``manage.py june chat``.

Chat delivery is the event log itself: a settled turn's events already reached the session's
subscribers, so ``deliver()`` checks the turn landed in the target session and records it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents_app.models import DeliveryStatus, ScheduleRun, SeenWebhook, WebhookDelivery
from agents_app.runtime.errors import JuneError
from agents_app.runtime.proactive import ChannelError, DeliveryError
from agents_app.runtime.seams import FINAL_STATUSES
from agents_app.runtime.session import TurnResult
from sessions_app import models as m
from sessions_app import services, telemetry, wiring
from sessions_app.outbox.deliveries import deliveries_settled
from sessions_app.outbox.queue import enqueue_delivery
from sessions_app.site_errors import AccessDenied, BadRequest, Unauthenticated

log = logging.getLogger(__name__)

SIGNATURE_WINDOW = 300  # seconds either side of now
SEEN_KEEP = timedelta(seconds=2 * SIGNATURE_WINDOW + 60)
USER_RE = re.compile(r"[\w.@:+-]{1,150}", re.ASCII)


# -- chat channels ------------------------------------------------------------------------------


class ChatChannel:
    """web / http / schedule: results appear in the target session's chat (its event log)."""

    def __init__(self, source: str = "web") -> None:
        self.source = source

    def check_target(self, target: dict[str, Any] | None) -> None:
        if not isinstance(target, dict) or not isinstance(target.get("session"), str):
            raise ChannelError(f"channel {self.source!r} delivers to a session: target needs 'session'")
        services.validate_session_key(target["session"])

    async def deliver(self, target: dict[str, Any], result: TurnResult) -> None:
        await sync_to_async(self.deliver_sync)(target, result)

    def deliver_sync(self, target: dict[str, Any], result: TurnResult) -> None:
        turn = m.Turn.objects.select_related("session").filter(pk=result.turn_id).first()
        if (
            turn is None
            or turn.session.key != target.get("session")
            or (target.get("agent") and turn.session.agent != target["agent"])
        ):
            raise ChannelError(f"turn {result.turn_id} is not in session {target.get('session')!r}")
        ScheduleRun.objects.filter(turn_id=result.turn_id).update(status="delivered", delivered_at=timezone.now())


def WebChannel() -> ChatChannel:  # noqa: N802 - named like the class it stands for
    return ChatChannel("web")


def HttpChannel() -> ChatChannel:  # noqa: N802
    return ChatChannel("http")


def ScheduleChannel() -> ChatChannel:  # noqa: N802
    return ChatChannel("schedule")


# -- webhook: configuration and signatures ---------------------------------------------------------


def _env_name(agent: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", agent.upper())


def _by_agent(values: dict[str, str], agent: str) -> str:
    """An agent's entry of the settings JUNE_WEBHOOK_SECRETS / JUNE_WEBHOOK_URLS (never the
    environment: ``june.settings`` fills them): by the agent's name, or by the key the
    ``<AGENT>`` part of a ``JUNE_WEBHOOK_SECRET_<AGENT>`` variable gives (upper case, ``_``)."""
    return values.get(agent) or values.get(_env_name(agent)) or ""


def webhook_secret(agent: str) -> bytes | None:
    value = _by_agent(settings.JUNE_WEBHOOK_SECRETS, agent)
    return value.encode() if value else None


def webhook_settings(agent: str) -> dict[str, Any]:
    conf = dict((wiring.agent(agent).settings or {}).get("webhook") or {})
    unsigned = conf.get("unsigned", "refuse")
    if unsigned not in ("refuse", "unattested"):
        raise ChannelError(f"agent {agent!r}: settings['webhook']['unsigned'] must be 'refuse' or 'unattested'")
    conf["unsigned"] = unsigned
    conf["deliver_url"] = _by_agent(settings.JUNE_WEBHOOK_URLS, agent) or conf.get("deliver_url") or None
    return conf


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, ``<timestamp>.<raw body>``)."""
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


class Replayed(JuneError):
    http_status = 409
    code = "replayed"


@dataclass(frozen=True)
class Verdict:
    signature: str | None  # the verified hex digest; None = unsigned
    timestamp: int | None = None


def verify_signature(*, agent: str, signature: str | None, timestamp: str | None, body: bytes, now: float) -> Verdict:
    """A signed request must verify (constant-time) within the window, else Unauthenticated;
    an unsigned one is returned as such (the caller applies the agent's ``unsigned`` rule)."""
    if not signature and not timestamp:
        return Verdict(None)
    secret = webhook_secret(agent)
    if secret is None:
        raise Unauthenticated(f"no webhook secret is configured for agent {agent!r}")
    if not signature or not timestamp or not re.fullmatch(r"\d{1,12}", timestamp):
        raise Unauthenticated("X-June-Signature and a numeric X-June-Timestamp are both required")
    if abs(now - int(timestamp)) > SIGNATURE_WINDOW:
        raise Unauthenticated("the signature's timestamp is outside the 5-minute window")
    if not hmac.compare_digest(sign(secret, timestamp, body).encode(), signature.strip().encode()):
        raise Unauthenticated("invalid signature")
    return Verdict(signature.strip()[len("sha256=") :], int(timestamp))


# -- webhook: inbound turns -----------------------------------------------------------------------------


def webhook_receive(*, agent: str, data: Any, verdict: Verdict) -> dict[str, Any]:
    """Start the webhook's turn. The speaker is attested only for a verified signature; a
    replayed signature is refused (409); webhook sessions have no owner (staff see them in the
    admin) and a user's session is never reachable from a webhook."""
    if not isinstance(data, dict):
        raise BadRequest('the body must be a JSON object {"session", "text", "user"}')
    unknown = set(data) - {"session", "text", "user"}
    if unknown:
        raise BadRequest(f"unknown fields: {sorted(unknown)}")
    name = services.validate_session_key(data.get("session"))
    key = services.webhook_session_key(name)
    text = services.validate_text(data.get("text"))
    user = data.get("user")
    if user is not None and (not isinstance(user, str) or not USER_RE.fullmatch(user)):
        raise BadRequest("user must be an identifier of at most 150 letters, digits and _ . @ : + -")
    attested = verdict.signature is not None
    # never None: a webhook turn always has a speaker, so its requests are never unrestricted
    speaker = {"id": f"webhook:{user or 'anonymous'}", "name": user or "webhook", "attested": attested}
    conf = webhook_settings(agent)
    with transaction.atomic():
        if attested:
            try:
                with transaction.atomic():
                    SeenWebhook.objects.create(agent=agent, signature=verdict.signature, timestamp=verdict.timestamp)
            except IntegrityError:
                raise Replayed("this signed request was already received") from None
        session = m.Session.objects.filter(agent=agent, key=key).first()
        if session is not None and session.owner_id is not None:  # unreachable: users cannot create the key
            raise AccessDenied("this session belongs to a user; a webhook may only use its own sessions")
        rec = services.turn_start(agent=agent, key=key, text=text, user=None, source="webhook", speaker=speaker)
        delivery = None
        if conf["deliver_url"]:
            delivery = WebhookDelivery.objects.create(
                agent=agent, session_key=key, turn_id=rec.turn_id, url=conf["deliver_url"]
            )
    SeenWebhook.objects.filter(seen_at__lt=timezone.now() - SEEN_KEEP).delete()
    return {
        "turn_id": rec.turn_id,
        "status": str(rec.status),
        "session": name,
        "attested": attested,
        "delivery": delivery.pk if delivery else None,
    }


# -- webhook: outbound delivery ---------------------------------------------------------------------------


def _payload(agent: str, key: str, result: TurnResult) -> dict[str, Any]:
    return {
        "agent": agent,
        "session": key.removeprefix(services.WEBHOOK_PREFIX),
        "turn_id": result.turn_id,
        "status": str(result.status),
        "text": result.text,
        "error": result.error,
        "request": result.request,
    }


def post_signed(*, agent: str, url: str, payload: dict[str, Any], timeout: float = 10.0) -> int:
    """One signed POST; the status code (2xx), else raises."""
    secret = webhook_secret(agent)
    if secret is None:
        raise ChannelError(f"no webhook secret for agent {agent!r}: deliveries are signed")
    body = json.dumps(payload, separators=(",", ":")).encode()
    ts = str(int(time.time()))
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-June-Timestamp": ts,
            "X-June-Signature": sign(secret, ts, body),
            "User-Agent": "june-webhook/1",
        },
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - operator-configured URL
        return resp.status


def deliver_with_retries(delivery: WebhookDelivery, result: TurnResult, *, sleep: Any = time.sleep) -> None:
    """POST until a 2xx, with exponential backoff; every failure is recorded on the row (the
    admin lists failed deliveries and can retry them). Raises DeliveryError when all fail."""
    tries = settings.JUNE_WEBHOOK_RETRIES
    backoff = settings.JUNE_WEBHOOK_BACKOFF
    payload = _payload(delivery.agent, delivery.session_key, result)
    for n in range(tries):
        try:
            status = post_signed(agent=delivery.agent, url=delivery.url, payload=payload)
        except Exception as exc:
            code = exc.code if isinstance(exc, urllib.error.HTTPError) else None
            telemetry.webhook_failure(delivery.agent, final=n + 1 >= tries)
            WebhookDelivery.objects.filter(pk=delivery.pk).update(
                attempts=delivery.attempts + n + 1,
                last_error=f"{type(exc).__name__}: {exc}"[:2000],
                response_status=code,
                updated_at=timezone.now(),
            )
            if n + 1 < tries:
                sleep(backoff * 2**n)
            continue
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.DELIVERED,
            attempts=delivery.attempts + n + 1,
            response_status=status,
            delivered_at=timezone.now(),
            updated_at=timezone.now(),
        )
        return
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED, updated_at=timezone.now())
    raise DeliveryError(f"webhook delivery of turn {delivery.turn_id} to {delivery.url} failed {tries} times")


class WebhookChannel:
    """Proactive turns delivered to the agent's webhook URL (``receive(WebhookChannel("ops"), …)``)."""

    source = "webhook"

    def __init__(self, agent: str) -> None:
        self.agent = agent

    def check_target(self, target: dict[str, Any] | None) -> None:
        if not webhook_settings(self.agent)["deliver_url"] or webhook_secret(self.agent) is None:
            raise ChannelError(f"agent {self.agent!r} has no webhook URL and secret to deliver to")

    async def deliver(self, target: dict[str, Any], result: TurnResult) -> None:
        await sync_to_async(self.deliver_sync)(target, result)

    def deliver_sync(self, target: dict[str, Any], result: TurnResult) -> None:
        url = webhook_settings(self.agent)["deliver_url"]
        if not url:
            raise ChannelError(f"agent {self.agent!r} has no webhook URL")
        rec = wiring.store().get_turn_sync(result.turn_id)
        delivery, _ = WebhookDelivery.objects.get_or_create(
            turn_id=result.turn_id,
            defaults={
                "agent": self.agent,
                "session_key": rec.session.key,
                "url": url,
                "status": DeliveryStatus.DELIVERING,
            },
        )
        deliver_with_retries(delivery, result)


def delivery_run(delivery_id: int) -> str:
    """django-q2 task: deliver a settled webhook turn (claimed by a conditional update, so a
    duplicate task does nothing)."""
    if not WebhookDelivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING).update(
        status=DeliveryStatus.DELIVERING, updated_at=timezone.now()
    ):
        return "not pending"
    delivery = WebhookDelivery.objects.get(pk=delivery_id)
    result = TurnResult.of(wiring.store().get_turn_sync(delivery.turn_id))
    try:
        deliver_with_retries(delivery, result)
    except DeliveryError as exc:
        return str(exc)
    return "delivered"


def deliveries_sweep() -> int:
    """Every minute: deliveries whose trigger was lost (crash between commit and publish, a
    task lost with its worker) are sent again."""
    settled = m.Turn.objects.filter(status__in=FINAL_STATUSES).values("pk")
    waiting = list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.WAITING, turn_id__in=settled).values_list(
            "turn_id", flat=True
        )
    )
    count = len(deliveries_settled(waiting))
    stuck = timezone.now() - timedelta(minutes=10)
    for pk in WebhookDelivery.objects.filter(
        status__in=[DeliveryStatus.PENDING, DeliveryStatus.DELIVERING], updated_at__lt=stuck
    ).values_list("pk", flat=True):
        WebhookDelivery.objects.filter(pk=pk, updated_at__lt=stuck).update(
            status=DeliveryStatus.PENDING, updated_at=timezone.now()
        )
        enqueue_delivery(pk)
        count += 1
    return count
