"""Message Batches end to end in one process, on the site's store: a webhook turn of an agent with
``batch = True`` parks with its request in the ledger; the poller sends it through the real SDK to
the local Batches peer (``fake_batches_api``), collects the answer and queues the turn again,
which settles with it, priced at the batch price. The kill tests with real workers are
tests/fault/test_batches_kill.py."""

from __future__ import annotations

import asyncio

import pytest

from agents_app.providers.anthropic_batches import BatchApi
from agents_app.runtime.agent import Agent
from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from sessions_app import pricing, services, wiring
from sessions_app.listings import parked_requests
from sessions_app.workers import batch_poller as batches
from sessions_app.workers import tasks

from .fake_batches_api import FakeBatchesAPI, message_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def peer(monkeypatch):
    api = FakeBatchesAPI()
    url = api.start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    yield api
    api.stop()


@pytest.fixture
def batcher(monkeypatch, settings):
    settings.JUNE_RATE_LIMITS = False
    definition = Agent("batcher", "Be brief.", model="anthropic", batch=True)
    monkeypatch.setattr(wiring, "agents", lambda: {"batcher": definition})
    wiring.agent_model.cache_clear()
    yield definition
    wiring.agent_model.cache_clear()


def start(text: str, source: str = "webhook") -> str:
    kind = "inbound" if source == "web" else "proactive"
    by = None if source == "web" else "hook:orders"
    return services.turn_start(agent="batcher", key=f"k-{text}", text=text, source=source, kind=kind, by=by).turn_id


def drive(turn_id: str) -> str | None:
    return asyncio.run(tasks._drive(turn_id))


def turn(turn_id: str) -> m.Turn:
    return m.Turn.objects.get(pk=turn_id)


def test_a_webhook_turn_parks_then_settles_with_the_batch_answer_at_half_price(peer, batcher):
    turn_id = start("hello")
    assert drive(turn_id) == TurnStatus.SUSPENDED
    parked = turn(turn_id)
    assert parked.pending["reason"] == "batch" and parked.pending["batch"]["key"] == f"{turn_id}:model:1"
    (row,) = m.BatchCall.objects.filter(turn_id=turn_id)
    assert row.status == "intent" and peer.created == []  # written before anything is sent
    assert row.params["messages"][-1]["content"][-1]["text"] == "hello"
    assert not parked_requests().filter(pk=turn_id).exists()  # nobody is asked to answer it

    api = BatchApi()
    assert batches.poll(api=api)["sent"] == 1
    assert batches.poll(api=api) == {
        "sent": 0,
        "recovering": 0,
        "answered": 0,
        "resumed": 0,
        "cancelled": 0,
    }  # still running
    assert turn(turn_id).status == TurnStatus.SUSPENDED
    peer.end()
    assert batches.poll(api=api)["answered"] == 1
    assert turn(turn_id).status == TurnStatus.SUSPENDED  # the answer is kept; the next pass resumes
    assert batches.poll(api=api)["resumed"] == 1
    assert turn(turn_id).status == TurnStatus.QUEUED
    assert drive(turn_id) == TurnStatus.COMPLETED

    done = turn(turn_id)
    assert done.text == "answer: hello"
    assert done.usage["batch_input_tokens"] == 100 and done.usage["input_tokens"] == 100
    assert done.usage["served_by"] == ["anthropic-batch:claude-sonnet-4-6"]
    full = pricing.cost_of({"input_tokens": 100, "output_tokens": 20}, "claude-sonnet-4-6")
    assert pricing.cost_of(done.usage, "claude-sonnet-4-6") == pytest.approx(full * 0.5)
    assert len(peer.created) == 1 and peer.custom_ids() == [row.custom_id]
    assert m.BatchCall.objects.get(pk=row.pk).delivered
    assert batches.poll(api=api) == {"sent": 0, "recovering": 0, "answered": 0, "resumed": 0, "cancelled": 0}


def test_many_parked_turns_go_in_one_batch(peer, batcher):
    ids = [start(f"t{i}") for i in range(5)]
    for turn_id in ids:
        assert drive(turn_id) == TurnStatus.SUSPENDED
    api = BatchApi()
    assert batches.poll(api=api)["sent"] == 5
    assert len(peer.created) == 1 and len(peer.created[0].requests) == 5
    peer.end()
    assert batches.poll(api=api)["answered"] == 5
    assert batches.poll(api=api)["resumed"] == 5
    for i, turn_id in enumerate(ids):
        assert drive(turn_id) == TurnStatus.COMPLETED and turn(turn_id).text == f"answer: t{i}"


def test_an_expired_request_fails_the_step_into_the_retry_budget(peer, batcher):
    expire = {"n": 1}

    def outcome(custom_id, params):
        if custom_id.endswith(f"-{expire['n']}") and expire["n"] == 1:
            return "expired", None
        return "succeeded", message_for(params, "late but here")

    peer.outcome = outcome
    turn_id = start("slow")
    drive(turn_id)
    api = BatchApi()
    batches.poll(api=api)
    peer.end()
    batches.poll(api=api)
    assert batches.poll(api=api)["resumed"] == 1
    # the step fails (retryable): the next attempt writes a new request and parks again
    assert drive(turn_id) == TurnStatus.SUSPENDED
    rows = list(
        m.BatchCall.objects.filter(turn_id=turn_id).order_by("attempt").values_list("attempt", "status", "error")
    )
    assert rows[0][:2] == (1, "failed") and "expired" in rows[0][2] and rows[1][:2] == (2, "intent")
    expire["n"] = 2
    batches.poll(api=api)
    peer.end()
    batches.poll(api=api)
    batches.poll(api=api)
    assert drive(turn_id) == TurnStatus.COMPLETED and turn(turn_id).text == "late but here"
    assert len(peer.created) == 2


def test_an_errored_request_spends_the_budget_and_the_turn_fails(peer, batcher, settings):
    settings.JUNE_MAX_ATTEMPTS = 2
    peer.outcome = lambda cid, params: ("errored", "the model is gone")
    peer.ends_after = 0.0
    turn_id = start("doomed")
    api = BatchApi()
    for _ in range(4):
        if drive(turn_id) == TurnStatus.FAILED:
            break
        for _ in range(3):
            batches.poll(api=api)
    done = turn(turn_id)
    assert done.status == TurnStatus.FAILED and "retry budget exhausted after 2 requests" in done.error["message"]
    assert len(peer.created) == 2  # one request per attempt, never more


def test_a_chat_turn_of_a_batching_agent_is_not_batched(peer, batcher):
    """Its request goes to the streaming Messages API (here: nothing listens there, so the
    step fails after its retries) and nothing is written to the ledger."""
    batcher.model_config = {"max_retries": 0}
    turn_id = start("hi", source="web")
    drive(turn_id)
    assert not m.BatchCall.objects.exists() and peer.created == []


class LostAnswer(BatchApi):
    """A create whose answer never came back: the batch exists at the API, the rows do not say so."""

    def create(self, requests):
        super().create(requests)
        raise ConnectionError("the poller stopped here")


def test_a_create_whose_checkpoint_was_lost_is_found_not_sent_again(peer, batcher, settings):
    settings.JUNE_BATCH_SUBMIT_GRACE = 0.01
    turn_id = start("once")
    drive(turn_id)
    with pytest.raises(ConnectionError):
        batches.poll(api=LostAnswer())
    assert m.BatchCall.objects.get(turn_id=turn_id).status == "submitting"
    api = BatchApi()
    counts = batches.poll(api=api)
    assert counts["recovering"] == 1 and counts["sent"] == 0
    peer.end()
    assert batches.poll(api=api)["answered"] == 1
    assert batches.poll(api=api)["resumed"] == 1
    assert drive(turn_id) == TurnStatus.COMPLETED and turn(turn_id).text == "answer: once"
    assert len(peer.created) == 1  # exactly one create


def test_rows_taken_by_a_pass_that_created_nothing_are_sent_again(peer, batcher, settings):
    settings.JUNE_BATCH_SUBMIT_GRACE = 0.01
    turn_id = start("retry")
    drive(turn_id)
    m.BatchCall.objects.filter(turn_id=turn_id).update(status="submitting", token="dead", submitted_at=1.0)
    peer.created.clear()
    api = BatchApi()
    # the pass before the dead one's time had a batch of someone else: listed, not a candidate
    counts = batches.poll(api=api)
    assert counts["recovering"] == 1  # back to intent (nothing created since), then…
    assert batches.poll(api=api)["sent"] == 1 and len(peer.created) == 1


def test_a_batched_step_is_priced_at_the_batch_price_by_its_served_by(settings):
    settings.JUNE_BATCH_PRICE_FACTOR = 0.5
    usage = {"input_tokens": 1000, "output_tokens": 100, "batch_input_tokens": 1000, "batch_output_tokens": 100}
    full = pricing.cost_of({"input_tokens": 1000, "output_tokens": 100}, "claude-sonnet-4-6")
    assert pricing.price_for("anthropic-batch:claude-sonnet-4-6") == pricing.price_for("claude-sonnet-4-6")
    assert pricing.cost_of(usage, "anthropic-batch:claude-sonnet-4-6") == pytest.approx(full / 2)
    settings.JUNE_BATCH_PRICE_FACTOR = 1.0
    assert pricing.cost_of(usage, "claude-sonnet-4-6") == pytest.approx(full)


def test_a_turn_reset_before_its_request_went_sends_nothing(peer, batcher):
    from agents_app.runtime.seams import SessionRef

    turn_id = start("never")
    drive(turn_id)
    asyncio.run(wiring.store().reset(SessionRef("batcher", "k-never")))
    assert batches.poll(api=BatchApi())["sent"] == 0 and peer.created == []
    row = m.BatchCall.objects.get(turn_id=turn_id)
    assert row.status == "failed" and row.delivered and "ended before" in row.error
    assert not batches.open_rows()


def test_a_parked_turn_lets_the_next_webhook_queue_and_can_be_cancelled(peer, batcher):
    from agents_app.runtime import rules
    from sessions_app.store import host_ops
    from sessions_app.store.rows import record_of

    first = start("first")
    drive(first)
    assert turn(first).waiting == 1 and not parked_requests().filter(pk=first).exists()
    second = services.turn_start(
        agent="batcher", key="k-first", text="second", source="webhook", kind="proactive", by="hook:orders"
    ).turn_id
    assert turn(second).status == TurnStatus.QUEUED  # behind the parked one, not refused
    rules.check_cancellable(record_of(turn(first)))
    host_ops.request_cancel(first, "requested")
    assert turn(first).status == TurnStatus.CANCELLED and turn(first).waiting == 0
    assert drive(second) == TurnStatus.SUSPENDED  # its own batch now
    api = BatchApi()
    assert batches.poll(api=api)["sent"] == 1  # the cancelled turn's request is never sent
    assert peer.custom_ids() == [m.BatchCall.objects.get(turn_id=second).custom_id]
