"""The live cancel signal: a doorbell to the worker running a turn (the request itself is a
row; this only makes it prompt). The worker side lives with the executor hook."""

from __future__ import annotations

import logging
from typing import Sequence

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def cancel_group(turn_id: str) -> str:
    return f"june.turn.{turn_id}"


def send_cancel(turn_ids: Sequence[str]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for turn_id in turn_ids:
        try:
            async_to_sync(layer.group_send)(cancel_group(turn_id), {"type": "june.cancel", "turn_id": turn_id})
        except Exception:  # the row is the truth: the worker sees it at its next commit or heartbeat
            log.exception("cancel signal for %s failed", turn_id)
