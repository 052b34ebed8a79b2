"""What a site's own tables hear when June deletes a session's turns (retention, erasure):
``turns_forgotten`` (``agent``, ``session_key``, ``turn_ids``), sent before the turns' rows go.
A tool that keeps rows per call (its ``ctx.turn_id`` or ``ctx.idempotency_key``, which starts
with the turn id) deletes them in a receiver; the demo agent's orders and refunds do here."""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from agents_app.models import Order, Refund

turns_forgotten = Signal()


def forget_demo_rows(sender: Any, *, turn_ids: list[str], **kwargs: Any) -> None:
    """The demo agent's orders and refunds made by these turns."""
    for at in range(0, len(turn_ids), 500):
        part = turn_ids[at : at + 500]
        Order.objects.filter(turn_id__in=part).delete()
        for turn_id in part:
            Refund.objects.filter(idempotency_key__startswith=f"{turn_id}:").delete()
