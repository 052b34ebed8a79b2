"""Settled webhook turns to their delivery queue: when a turn with a waiting
``WebhookDelivery`` settles, the row becomes pending and a ``delivery_run`` task is enqueued
(the POST itself is ``sessions_app.proactive.channels``). At-least-once: the deliveries sweep
re-sends what a crash between commit and publish lost."""

from __future__ import annotations

import logging
from typing import Any, Sequence

from asgiref.sync import sync_to_async
from django.utils import timezone

from agents_app.models import DeliveryStatus, WebhookDelivery
from agents_app.runtime.events import TERMINAL_TYPES
from agents_app.runtime.seams import FINAL_STATUSES, LoggedEvent, SessionRef
from sessions_app import models as m
from sessions_app.outbox.queue import enqueue_delivery

log = logging.getLogger(__name__)


def deliveries_settled(turn_ids: Sequence[str]) -> list[int]:
    """Turns that settled: their waiting deliveries become pending and are enqueued."""
    enqueued = []
    for row in WebhookDelivery.objects.filter(turn_id__in=list(turn_ids), status=DeliveryStatus.WAITING):
        turn = m.Turn.objects.filter(pk=row.turn_id).values_list("status", flat=True).first()
        if turn not in FINAL_STATUSES:
            continue  # parked: the result is delivered when the resumed turn ends
        if WebhookDelivery.objects.filter(pk=row.pk, status=DeliveryStatus.WAITING).update(
            status=DeliveryStatus.PENDING, updated_at=timezone.now()
        ):
            enqueue_delivery(row.pk, turn_id=row.turn_id)
            enqueued.append(row.pk)
    return enqueued


def delivery_retry(*, delivery_id: int) -> bool:
    """Admin action: send a failed delivery again."""
    if WebhookDelivery.objects.filter(pk=delivery_id, status=DeliveryStatus.FAILED).update(
        status=DeliveryStatus.PENDING, updated_at=timezone.now()
    ):
        enqueue_delivery(delivery_id)
        return True
    return False


#: the key prefix of the webhook channel's sessions (``services.WEBHOOK_PREFIX``): only their
#: turns have deliveries
WEBHOOK_SESSIONS = "webhook:"


class DeliverySink:
    """An EventSink on the executor: when a turn settles, its waiting webhook delivery is sent.
    A delivery is made only for a turn of a webhook session (``proactive.channels``), so the
    turns of every other session end without a look (a thread hop and a query each)."""

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        if not session.key.startswith(WEBHOOK_SESSIONS):
            return
        ended = [e.event.turn_id for e in events if e.event.type in TERMINAL_TYPES]
        if ended:
            try:
                await sync_to_async(deliveries_settled)(ended)
            except Exception:  # the sweep retries; a delivery must not fail the turn
                log.exception("could not enqueue webhook deliveries for %s", ended)

    async def delta(self, session: SessionRef, event: Any) -> None:
        return None
