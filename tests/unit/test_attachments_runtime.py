"""Attachments in the engine: metadata on the opening message, seen by every model call and by
tools, kept across a crash and a replay (the bytes are the host's: never in the transcript)."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import (
    Agent,
    ModelRequest,
    ScriptedModel,
    TurnInput,
    TurnStatus,
    reply,
    tool,
)
from agents_app.runtime.events import TurnStarted, event_from_json
from agents_app.runtime.messages import Message, Role

from ._support import FakeClock, make_executor
from .test_replay import REF, Crash, CrashingStore

PHOTO = {"id": "a" * 32, "type": "image/png", "name": "photo.png", "size": 68, "pages": None}
REPORT = {"id": "b" * 32, "type": "application/pdf", "name": "report.pdf", "size": 900, "pages": 3}


def test_message_and_input_round_trip_with_attachments_and_stay_lean_without():
    message = Message(Role.USER, text="look", attachments=(PHOTO, REPORT))
    assert Message.from_json(message.to_json()) == message
    assert "attachments" not in Message(Role.USER, text="plain").to_json()
    turn_input = TurnInput("look", attachments=(PHOTO,))
    assert TurnInput.from_json(turn_input.to_json()).attachments == (PHOTO,)
    assert "attachments" not in TurnInput("plain").to_json()
    started = TurnStarted("t1", text="look", attachments=(PHOTO,))
    assert started.to_json()["attachments"] == [PHOTO]
    assert "attachments" not in TurnStarted("t1", text="plain").to_json()
    assert list(event_from_json(started.to_json()).attachments) == [PHOTO]


def test_from_json_ignores_junk_in_a_stored_inputs_attachments():
    assert TurnInput.from_json({"text": "x", "attachments": ["nope", PHOTO, 3]}).attachments == (PHOTO,)


def _script(request: ModelRequest) -> Any:
    if request.messages[-1].role == "tool":
        return reply("read them")
    return reply("reading", ("inspect", {}))


def _world(store: CrashingStore) -> tuple[Agent, ScriptedModel, list[Any]]:
    seen: list[Any] = []

    @tool("inspect", "lists the turn's attachments")
    def inspect(input: dict[str, Any], ctx: Any) -> Any:
        seen.append(ctx.attachments)
        return {"names": [a["name"] for a in ctx.attachments]}

    return Agent("a", "instr", tools=[inspect]), ScriptedModel(_script), seen


@pytest.mark.parametrize("crash_after", [None, 1, 2, 3])
async def test_every_model_call_sees_the_attachments_once_even_after_a_crash(crash_after):
    """A turn replayed after its opening, its first model step or its tool step still sends the
    attachments on the one opening message, once per model call."""
    store = CrashingStore(crash_after=crash_after)
    agent, model, seen = _world(store)
    clock = FakeClock()
    await store.create_turn(
        REF, TurnInput("what are these?", attachments=(PHOTO, REPORT)), turn_id="t1", policy=agent.policy_for(None)
    )
    if crash_after is not None:
        with pytest.raises(Crash):
            await make_executor(store, agent, model, clock).drive("t1")
        clock.advance(60)
    assert await make_executor(store, agent, model, clock).drive("t1") == TurnStatus.COMPLETED
    transcript = store.transcript(REF)
    assert [m.attachments for m in transcript if m.attachments] == [(PHOTO, REPORT)]
    assert model.calls == 2
    for request in model.requests:
        carrying = [m for m in request.messages if m.attachments]
        assert len(carrying) == 1 and carrying[0].role == Role.USER and carrying[0].attachments == (PHOTO, REPORT)
    assert seen and all(tuple(s) == (PHOTO, REPORT) for s in seen)
    started = [e.event for e in await store.events(REF) if e.event.type == "turn.started"]
    assert len(started) == 1 and tuple(started[0].attachments) == (PHOTO, REPORT)
