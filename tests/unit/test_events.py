"""Typed events: their JSON form round-trips, and deltas are live only."""

from __future__ import annotations

import json

import pytest

from agents_app.runtime import (
    EVENT_TYPES,
    Agent,
    ModelReply,
    ReasoningDelta,
    ScriptedModel,
    TextDelta,
    TurnStatus,
    event_from_json,
)
from agents_app.runtime import events as ev

from ._support import make_runtime

SAMPLES = [
    ev.TurnStarted("t1", trigger="resume", text="hello"),
    ev.ReasoningDelta("t1", text="hmm"),
    ev.MessageDelta("t1", text="Hel"),
    ev.MessageCompleted("t1", text="Hello", index=3),
    ev.ActionRequested("t1", call={"id": "c0", "name": "add", "input": {"n": [1, 2]}}),
    ev.ActionCompleted("t1", call_id="c0", name="add", result={"error": "ValueError: x"}, error="ValueError: x"),
    ev.InputRequested(
        "t1",
        request={"id": "approve", "prompt": "?", "schema": {"type": "boolean"}, "answerers": {"user": "u1"}},
        call_id="c0",
    ),
    ev.InputAnswered("t1", input_id="approve", by="u1"),
    ev.ChildStarted(
        "t1",
        call_id="c0",
        child={"turn_id": "k1", "agent": "researcher", "session": "sub:t1:c0:0", "index": 0, "goal": "tides"},
    ),
    ev.TurnCompleted("t1", text="done"),
    ev.TurnFailed("t1", error="boom", phase="tool", step="tool:1:c0"),
    ev.TurnCancelled("t1", reason="replaced"),
    ev.SessionReset("", previous_session="s1#g0", generation=1),
    ev.BranchSwitched("", generation=2, previous=0, at=4),
    ev.TakeoverStarted("", by="Olga Ops", running="finish"),
    ev.TakeoverEnded("", by="Olga Ops"),
    ev.PersonMessage("", role="person", text="Hello, Olga here.", by="Olga Ops"),
    ev.CompactionStarted("t1", reason="reactive", step="compact:9", messages=6, tokens_before=900),
    ev.CompactionCompleted(
        "t1",
        reason="reactive",
        step="compact:9",
        messages=6,
        tokens_before=900,
        tokens_after=120,
        boundary=5,
        index=9,
        summary="they talked",
    ),
    ev.CompactionFailed("t1", reason="proactive", step="compact:9", error="empty"),
]


def test_the_samples_cover_every_event_type():
    assert sorted(type(e).type for e in SAMPLES) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("event", SAMPLES, ids=[type(e).type for e in SAMPLES])
def test_every_event_round_trips_through_json(event):
    data = event.to_json()
    assert data["type"] == type(event).type
    assert event_from_json(json.loads(json.dumps(data))) == event


def test_unknown_keys_are_ignored_when_reading():
    data = {**ev.TurnCompleted("t1", text="ok").to_json(), "seq": 7}
    assert event_from_json(data) == ev.TurnCompleted("t1", text="ok")


def test_only_the_deltas_are_not_durable():
    assert {t for t, cls in EVENT_TYPES.items() if not cls.durable} == {"message.delta", "reasoning.delta"}


async def test_deltas_are_published_live_and_never_logged():
    model = ScriptedModel(
        lambda request: [ReasoningDelta("thinking"), TextDelta("Hi "), TextDelta("there"), ModelReply(text="Hi there")]
    )
    rt, store, sink = make_runtime(Agent("a", "instr"), model)
    s = rt.session("a", "s1")
    live: list[str] = []
    s.observe(lambda e: live.append(e.type))
    res = await s.turn("hello", timeout=5)
    assert res.status == TurnStatus.COMPLETED and res.text == "Hi there"
    assert [(e.type, e.text) for _, e in sink.deltas] == [
        ("reasoning.delta", "thinking"),
        ("message.delta", "Hi "),
        ("message.delta", "there"),
    ]
    logged = [e.event.type for e in await store.events(s.ref)]
    assert logged == ["turn.started", "message.completed", "turn.completed"]
    assert sink.types() == logged
    assert live == [
        "turn.started",
        "reasoning.delta",
        "message.delta",
        "message.delta",
        "message.completed",
        "turn.completed",
    ]
    assert [e.seq for e in await store.events(s.ref)] == [1, 2, 3]
