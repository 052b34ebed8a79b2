"""ChannelsEventSink: events to browsers through the Channels layer, after their commit.

The layer is at-most-once; the durable event log is the truth and the layer is the doorbell.
Token deltas are coalesced so a fast model does not cost one layer message per token.
"""

from __future__ import annotations

import logging
from typing import Sequence

from channels.layers import get_channel_layer

from agents_app.runtime.events import TurnEvent
from agents_app.runtime.seams import LoggedEvent, SessionRef

log = logging.getLogger(__name__)


def group_name(session: SessionRef) -> str:
    """A Channels group name (letters, digits, hyphens, dots, underscores; < 100 chars)."""
    import hashlib

    digest = hashlib.sha1(f"{session.agent}\0{session.key}".encode()).hexdigest()[:24]
    return f"june.session.{digest}"


class ChannelsEventSink:
    def __init__(self) -> None:
        self.layer = get_channel_layer()

    async def publish(self, session: SessionRef, events: Sequence[LoggedEvent]) -> None:
        if self.layer is None or not events:
            return
        try:
            await self.layer.group_send(
                group_name(session),
                {"type": "june.events", "events": [{"seq": e.seq, **e.event.to_json()} for e in events]},
            )
        except Exception:  # the log has it: a client re-reads after its last seq
            log.exception("publishing events of %s failed", session)

    async def delta(self, session: SessionRef, event: TurnEvent) -> None:
        if self.layer is None:
            return
        try:
            await self.layer.group_send(group_name(session), {"type": "june.delta", "event": event.to_json()})
        except Exception:
            log.exception("publishing a delta of %s failed", session)
