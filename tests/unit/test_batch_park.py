"""A model that answers later (``ModelParked``, a Message Batch): the turn parks with no worker
waiting, resumes through ``resume_parked`` (not the answer path), and the step runs again and
takes the answer. Only schedule and webhook turns of an agent (or schedule) that batches ask."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agents_app.runtime import Agent, TurnStatus, rules
from agents_app.runtime.model import ModelParked, ModelReply, ModelRequest, TextDelta
from agents_app.runtime.seams import TurnInput

from ._support import make_runtime


class LaterModel:
    """Parks every batched request until ``answers`` holds its key; answers the others now."""

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest):
        self.requests.append(request)
        if request.batch_key and request.batch_key not in self.answers:
            raise ModelParked("batch", {"key": request.batch_key})
        text = self.answers.get(request.batch_key, "now")
        yield TextDelta(text)
        yield ModelReply(text=text, usage={"input_tokens": 3, "output_tokens": 1})


def run(agent: Agent, source: str, target: dict[str, Any] | None = None):
    model = LaterModel()
    rt, store, _ = make_runtime(agent, model)  # type: ignore[arg-type]
    kind = "inbound" if source == "web" else "proactive"

    async def go():
        session = rt.session(agent.name, "k")
        turn_id = await session.start(TurnInput(text="go", kind=kind, by="x", source=source, target=target))
        return turn_id, await session.result(turn_id, timeout=5)

    turn_id, result = asyncio.run(go())
    return rt, store, model, turn_id, result


@pytest.mark.parametrize(
    ("batch", "source", "target", "parks"),
    [
        (True, "webhook", None, True),
        (True, "schedule", None, True),
        (True, "web", None, False),  # a chat turn never batches
        (True, "http", None, False),
        (False, "schedule", {"batch": True}, True),  # the schedule says so
        (False, "webhook", {"batch": True}, False),  # a webhook's target cannot
        (False, "webhook", None, False),
    ],
)
def test_who_batches(batch, source, target, parks):
    _, _, model, turn_id, result = run(Agent("ops", "You are ops.", batch=batch), source, target)
    assert (result.status == TurnStatus.SUSPENDED) is parks
    assert (model.requests[0].batch_key == f"{turn_id}:model:1") is parks
    if not parks:
        assert model.requests[0].batch_key == "" and result.status == TurnStatus.COMPLETED


def test_a_parked_turn_resumes_through_the_store_and_takes_its_answer():
    rt, store, model, turn_id, result = run(Agent("ops", "You are ops.", batch=True), "webhook")
    rec = asyncio.run(store.get_turn(turn_id))
    assert rec.pending["reason"] == "batch" and rec.pending["batch"] == {"key": f"{turn_id}:model:1"}
    assert rec.phase == "parked" and rec.attempts == 0  # a park gives its claim back
    assert asyncio.run(store.resume_parked(turn_id, "batch", "another")) is None  # not parked on that
    model.answers[f"{turn_id}:model:1"] = "later"
    outcome = asyncio.run(store.resume_parked(turn_id, "batch", f"{turn_id}:model:1"))
    assert outcome is not None and outcome.turn.status == TurnStatus.QUEUED
    assert [type(e.event).__name__ for e in outcome.events] == ["TurnStarted"]
    assert asyncio.run(store.resume_parked(turn_id, "batch", f"{turn_id}:model:1")) is None  # once
    assert asyncio.run(rt.executor.drive(turn_id)) == TurnStatus.COMPLETED
    assert asyncio.run(store.get_turn(turn_id)).text == "later"
    assert len(model.requests) == 2  # the step ran again, with the same key
    assert model.requests[1].batch_key == model.requests[0].batch_key


def test_a_parked_turn_waits_for_no_person_a_cancel_settles_it_and_a_new_turn_queues_behind():
    rt, store, model, turn_id, _ = run(Agent("ops", "You are ops.", batch=True), "webhook")
    rec = asyncio.run(store.get_turn(turn_id))
    assert rec.waiting == 1  # like a parent on its children: no one is asked to answer
    assert asyncio.run(store.pending(rec.session)) == []

    async def second():
        return await store.create_turn(
            rec.session, TurnInput(text="again", kind="proactive", by="x", source="webhook"), turn_id="t2" * 16
        )

    assert asyncio.run(second()).turn.status == TurnStatus.QUEUED  # not refused: queued behind
    rules.check_cancellable(rec)  # a person may cancel it
    outcome = asyncio.run(store.request_cancel(turn_id, "requested"))
    assert [type(e.event).__name__ for e in outcome.events] == ["TurnCancelled"]
    assert asyncio.run(store.get_turn(turn_id)).status == TurnStatus.CANCELLED
    assert asyncio.run(store.resume_parked(turn_id, "batch", f"{turn_id}:model:1")) is None


def test_a_schedule_declares_batch():
    from agents_app.cron import declarations

    agent = Agent("ops", schedules=[{"name": "nightly", "cron": "0 2 * * *", "seed": "summarize", "batch": True}])
    assert declarations(agent)[0].batch is True
    agent.schedules[0].pop("batch")
    assert declarations(agent)[0].batch is False


def test_batch_in_agent_py_must_be_a_bool(tmp_path):
    from agents_app.loader import load_agent
    from agents_app.runtime.errors import AgentConfigError

    bad, good = tmp_path / "nightly_bad", tmp_path / "nightly_good"
    for folder, text in ((bad, 'batch = "yes"\n'), (good, "batch = True\n")):
        folder.mkdir()
        (folder / "agent.py").write_text(text)
    with pytest.raises(AgentConfigError, match="batch must be True or False"):
        load_agent(bad)
    agent = load_agent(good)
    assert agent.batch is True and agent.policy_for("webhook")["batch"] is True
    assert "batch" not in agent.policy_for("web")
