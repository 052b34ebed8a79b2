"""The executor's DeliverySink (sessions_app/outbox/deliveries.py): a settled turn's waiting
webhook delivery is looked up only for turns of webhook sessions — the only ones a delivery is
made for — so every other turn ends without that look (a thread hop and a query)."""

from __future__ import annotations

import asyncio

from agents_app.runtime import events as ev
from agents_app.runtime.seams import LoggedEvent, SessionRef
from sessions_app import services
from sessions_app.outbox import deliveries


def published(monkeypatch, key: str, *events: ev.TurnEvent) -> list[list[str]]:
    looked: list[list[str]] = []
    monkeypatch.setattr(deliveries, "deliveries_settled", lambda turn_ids: looked.append(list(turn_ids)) or [])
    logged = [LoggedEvent(seq=n, event=e) for n, e in enumerate(events, 1)]
    asyncio.run(deliveries.DeliverySink().publish(SessionRef("faultagent", key), logged))
    return looked


def test_a_webhook_sessions_settled_turn_is_looked_up(monkeypatch):
    key = services.webhook_session_key("orders")
    assert published(monkeypatch, key, ev.TurnCompleted("t1", text="done")) == [["t1"]]
    assert published(monkeypatch, key, ev.TurnStarted("t1")) == []  # not settled: nothing to send yet


def test_another_sessions_turn_ends_without_a_look(monkeypatch):
    assert published(monkeypatch, "chat-1", ev.TurnCompleted("t1", text="done")) == []
    assert published(monkeypatch, "chat-1", ev.TurnFailed("t2", error="boom")) == []


def test_the_prefix_is_the_webhook_channels():
    assert deliveries.WEBHOOK_SESSIONS == services.WEBHOOK_PREFIX
