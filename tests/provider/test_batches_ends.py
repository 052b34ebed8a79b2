"""Message Batches, the ends of a request: a turn cancelled while its request is in a batch (the
batch is cancelled at the API once no waiting turn has a request in it), an answer that did not
fit the model's context window (compacted and asked again, not retried as it was), a lost create
found past the first page of the API's list, and what the admin says a batch turn waits on.
Against the local Batches peer through the real SDK (``fake_batches_api``)."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync

from agents_app.providers.anthropic_batches import BatchApi
from agents_app.runtime.agent import Agent
from agents_app.runtime.model import ContextOverflowError, ModelParked, ModelReply, ModelRequest, StopReason
from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from sessions_app.store import batch_model, host_ops
from sessions_app.workers import batch_poller as batches

from .fake_batches_api import Batch, message_for
from .test_batches import LostAnswer, batcher, drive, peer, start, turn  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_whose_every_turn_was_cancelled_is_cancelled_at_the_api(peer, batcher):  # noqa: F811
    first, second = start("one"), start("two")
    drive(first), drive(second)
    api = BatchApi()
    assert batches.poll(api=api)["sent"] == 2 and len(peer.created) == 1
    batch_id = peer.created[0].id
    host_ops.request_cancel(first, "requested")
    assert turn(first).status == TurnStatus.CANCELLED
    assert batches.poll(api=api)["cancelled"] == 0 and peer.cancelled == []  # the second still waits on it
    host_ops.request_cancel(second, "requested")
    assert batches.poll(api=api)["cancelled"] == 2 and peer.cancelled == [batch_id]
    assert set(m.BatchCall.objects.values_list("status", "delivered")) == {("failed", True)}
    assert not batches.open_rows()  # nothing left to poll for
    assert peer.results_read == 0  # nor any answer read for nobody


def test_a_batch_nobody_waits_on_is_cancelled_behind_shared_ones(peer, batcher, monkeypatch):  # noqa: F811
    """A batch another turn still waits on runs on; it never takes the place of one nobody waits on
    in a pass's bounded list (with ``MAX_BATCHES`` such batches, none behind them was cancelled)."""
    monkeypatch.setattr(batches, "MAX_BATCHES", 1)
    api = BatchApi()
    shared_a, shared_b = start("one"), start("two")
    drive(shared_a), drive(shared_b)
    assert batches.poll(api=api)["sent"] == 2
    alone = start("three")
    drive(alone)
    assert batches.poll(api=api)["sent"] == 1
    own = peer.created[1].id
    host_ops.request_cancel(shared_a, "requested")  # its batch runs on for shared_b
    host_ops.request_cancel(alone, "requested")  # nobody waits on its batch
    for _ in range(3):
        batches.poll(api=api)
    assert peer.cancelled == [own]


def test_a_lost_create_past_the_first_page_of_the_list_is_found(peer, batcher, settings):  # noqa: F811
    """Recovery listed only the newest 100 batches: with more created since by others (a busy
    site, other pollers), the lost one was not among them and its request went again."""
    settings.JUNE_BATCH_SUBMIT_GRACE = 0.01
    turn_id = start("lost")
    drive(turn_id)
    with pytest.raises(ConnectionError):
        batches.poll(api=LostAnswer())
    lost = peer.created[0].id
    now = time.time()
    peer.created += [Batch(id=f"msgbatch_other_{i:03d}", created_at=now + 1, requests=[]) for i in range(150)]
    api = BatchApi()
    assert batches.poll(api=api)["recovering"] == 1
    assert lost in m.BatchCall.objects.get(turn_id=turn_id).candidates and peer.listed >= 2  # two pages
    peer.end()
    assert batches.poll(api=api)["answered"] == 1
    assert batches.poll(api=api)["resumed"] == 1
    assert drive(turn_id) == TurnStatus.COMPLETED and turn(turn_id).text == "answer: lost"
    assert [b.id for b in peer.created if b.requests] == [lost]  # sent once


def _row(status: str, **fields) -> m.BatchCall:
    turn_id = start("long")
    drive(turn_id)
    row = m.BatchCall.objects.get(turn_id=turn_id)
    m.BatchCall.objects.filter(pk=row.pk).update(status=status, batch_id="msgbatch_x", **fields)
    return m.BatchCall.objects.get(pk=row.pk)


def _stream(row: m.BatchCall, definition: Agent):
    """The batch model's answer to the row's step, as the loop asks it again."""

    class Inner:
        platform, model = "anthropic", "claude-sonnet-4-6"

        def params(self, request):
            return {"model": self.model, "max_tokens": 100, "messages": [{"role": "user", "content": "compacted"}]}

    model = batch_model.BatchModel(Inner(), definition, max_attempts=3)

    async def first():
        async for chunk in model.stream(ModelRequest(system="", messages=(), tools=(), batch_key=row.key)):
            return chunk

    return async_to_sync(first)()


@pytest.mark.parametrize("how", ["errored", "stopped"])
def test_an_answer_longer_than_the_window_is_compacted_and_asked_anew(peer, batcher, how):  # noqa: F811
    """An errored "prompt is too long" was retried as it was until the budget ran out; a stop
    reason ``model_context_window_exceeded`` made the compacted step read the same answer again.
    Either is an overflow to the loop (it compacts), and the next request is a new one."""
    if how == "errored":
        row = _row("failed", error="the batch's request errored: prompt is too long: 250000 tokens > 200000 maximum")
        with pytest.raises(ContextOverflowError):
            _stream(row, batcher)
    else:
        message = {**message_for({}, ""), "content": [], "stop_reason": "model_context_window_exceeded"}
        row = _row("done", result=message)
        reply = _stream(row, batcher)
        assert isinstance(reply, ModelReply) and reply.stop_reason == StopReason.CONTEXT_OVERFLOW
    assert m.BatchCall.objects.get(pk=row.pk).reported
    with pytest.raises(ModelParked):  # the compacted request: attempt 2, not the old answer again
        _stream(row, batcher)
    newer = batch_model.latest(row.key)
    assert newer.attempt == 2 and newer.status == "intent" and newer.params["messages"][0]["content"] == "compacted"


def test_the_admin_says_what_a_batch_turn_waits_on_and_since_when(peer, batcher, admin_client):  # noqa: F811
    turn_id = start("admin")
    drive(turn_id)
    page = admin_client.get(f"/admin/sessions_app/turn/{turn_id}/change/").content.decode()
    assert "waiting on a message batch (request written" in page and "not sent yet" in page
    assert "waiting on 1" not in page
    batches.poll(api=BatchApi())
    page = admin_client.get(f"/admin/sessions_app/turn/{turn_id}/change/").content.decode()
    assert f"waiting on message batch {peer.created[0].id} (sent " in page
    assert "parked: waiting on a message batch" in page  # its phase, in words


def test_a_cancel_that_the_api_refuses_still_closes_the_rows(peer, batcher):  # noqa: F811
    turn_id = start("gone")
    drive(turn_id)
    api = BatchApi()
    batches.poll(api=api)
    peer.created.clear()  # the batch is gone at the API (archived): its cancel is a 404
    host_ops.request_cancel(turn_id, "requested")
    assert batches.poll(api=api)["cancelled"] == 1 and not batches.open_rows()
