"""Issue 35 item 3: cancel's rules live in ``rules.check_cancellable``, applied once in
``AgentSession.cancel``, so HTTP and the websocket answer the same.

Pins: ``research secret plans`` parks the parent on a child that waits for an operator;
``POST …/turns/<parent>/cancel`` answered 409 ("the turn is waiting for an answer") and the
parent stayed suspended, although ``rules.cancel_now(waiting=)`` and docs/subagents.md say such
a parent is cancelled at once, with its children. The websocket's cancel had no such check: it
acked a no-op for an ordinary parked turn where HTTP said 409."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from agents_app.runtime import LocalDispatcher, TurnInput, TurnStatus
from sessions_app import models as m
from sessions_app import wiring

from .test_api import Api, make_user, token_for
from .test_consumers import communicator, cookie_for, receive_until_ready

pytestmark = pytest.mark.django_db(transaction=True)


async def parked(user, key: str, text: str) -> str:
    """A turn of ``ops`` run until it parks (children run too, on this process's dispatcher)."""
    rt = wiring.runtime(dispatcher=LocalDispatcher())
    s = rt.session("ops", key)
    rec = await s.start_turn(
        TurnInput(text, source="web", user={"id": str(user.pk), "attested": True}), created_by=user
    )
    await rt.dispatcher.idle()  # the turn and any children it spawned have run until they park
    status = await sync_to_async(m.Turn.objects.values_list("status", flat=True).get)(pk=rec.turn_id)
    assert status == TurnStatus.SUSPENDED, status
    return rec.turn_id


def assert_tree_cancelled(parent: str) -> None:
    assert m.Turn.objects.get(pk=parent).status == TurnStatus.CANCELLED
    children = list(m.Turn.objects.filter(parent_id=parent))
    assert children and all(c.status == TurnStatus.CANCELLED for c in children), [c.status for c in children]


def test_http_cancels_a_parent_parked_on_its_children_at_once_with_them(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    parent = async_to_sync(parked)(alice, "sp1", "research secret plans")
    assert m.Turn.objects.get(pk=parent).waiting == 1
    status, body, _ = Api(token_for(alice)).post(f"/api/agents/ops/sessions/sp1/turns/{parent}/cancel")
    assert status in (200, 202) and body["status"] == "cancelled", body
    assert_tree_cancelled(parent)


def test_http_refuses_to_cancel_a_turn_parked_on_an_answer(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = make_user("alice")
    turn = async_to_sync(parked)(alice, "rf1", "refund order 42 10")
    status, body, _ = Api(token_for(alice)).post(f"/api/agents/ops/sessions/rf1/turns/{turn}/cancel")
    assert status == 409 and "waiting for an answer" in body["error"]["message"], body
    assert m.Turn.objects.get(pk=turn).status == TurnStatus.SUSPENDED


@pytest.mark.asyncio
@pytest.mark.usefixtures("settled")
async def test_the_websocket_answers_as_http_does(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    alice = await sync_to_async(make_user)("alice")
    refund = await parked(alice, "ws1", "refund order 42 10")
    comm = communicator("/ws/agents/ops/sessions/ws1/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await comm.send_json_to({"type": "cancel", "turn_id": refund, "id": "c1"})
    reply = await comm.receive_json_from(timeout=30)
    while reply.get("type") not in ("ack", "error"):
        reply = await comm.receive_json_from(timeout=30)
    assert reply["type"] == "error" and reply["status"] == 409 and "waiting for an answer" in reply["message"], reply
    await comm.disconnect()

    parent = await parked(alice, "ws2", "research secret plans")
    comm = communicator("/ws/agents/ops/sessions/ws2/", await cookie_for(alice))
    assert (await comm.connect(timeout=30))[0]
    await receive_until_ready(comm)
    await comm.send_json_to({"type": "cancel", "turn_id": parent, "id": "c2"})
    reply = await comm.receive_json_from(timeout=30)
    while reply.get("type") not in ("ack", "error"):
        reply = await comm.receive_json_from(timeout=30)
    assert reply["type"] == "ack" and reply["status"] == "cancelled", reply
    await comm.disconnect()
    await sync_to_async(assert_tree_cancelled)(parent)
