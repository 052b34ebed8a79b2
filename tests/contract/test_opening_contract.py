"""A turn's opening and closing on every store (the fixture of ``test_store_contract``): a claim
that loads the turn with it (``SessionStore.claim_and_load``), and the chain's hand-off named by
the unit that settles a turn for good (``Commit.runnable``)."""

from __future__ import annotations

import uuid

import pytest

from agents_app.runtime import Message, NotFound, Phase, Role, StaleAttemptError, TurnInput, TurnStatus
from agents_app.runtime import events as ev
from tests.contract import test_store_contract as contract
from tests.contract.test_store_contract import REF, _compact, _history, claimed, tid

store = contract.store  # the contract suite's fixture: every store
pytestmark = pytest.mark.django_db(transaction=True)

REQUEST = {"id": "approve", "prompt": "ok?", "schema": {"type": "object"}, "answerers": None}


def parks(turn_id):
    def work(tx):
        tx.emit(ev.InputRequested(turn_id, request=REQUEST, call_id="c0"))
        tx.journal(Phase.PARKED, call_id="c0")
        tx.settle(TurnStatus.SUSPENDED, pending={"request": REQUEST, "call_id": "c0"})

    return work


async def claim_and_load(store, turn_id, *, now=100.0, owner="w1"):
    attempt = uuid.uuid4().hex
    state = await store.claim_and_load(turn_id, owner=owner, attempt_id=attempt, now=now, lease_seconds=10)
    return state, attempt


async def test_claim_and_load_returns_the_claimed_turn_and_its_state(store):
    earlier, attempt = await claimed(store)
    await store.atomic(earlier, attempt, _history(earlier, 3))
    await store.atomic(earlier, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED, text="2"))
    turn_id = tid()
    await store.create_turn(REF, TurnInput(text="next", source="web"), turn_id=turn_id, policy={"system": "s"})
    state, attempt = await claim_and_load(store, turn_id, now=200.0)
    rec = state.turn
    assert (rec.turn_id, rec.session, rec.status, rec.attempt_id) == (turn_id, REF, TurnStatus.RUNNING, attempt)
    assert (rec.attempts, rec.lease_owner, rec.lease_expires) == (1, "w1", 210.0)
    assert rec.input.text == "next" and rec.input.source == "web" and rec.policy == {"system": "s"}
    assert [m.text for m in state.transcript] == ["0", "1", "2"]
    assert (state.base, state.boundary, state.summary, state.steps, state.answers) == (0, 0, None, set(), {})
    assert await store.get_turn(turn_id) == rec
    assert state.turn.journal == {} and state.turn.generation == 0
    loaded = await store.load(turn_id)
    assert (loaded.turn, loaded.transcript) == (rec, state.transcript)


async def test_claim_and_load_claims_what_claim_claims(store):
    first, second = tid(), tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=first)
    await store.create_turn(REF, TurnInput(text="2"), turn_id=second)
    assert (await claim_and_load(store, second))[0] is None  # not first in its chain
    assert (await store.get_turn(second)).attempts == 0
    state, attempt = await claim_and_load(store, first, now=100.0)
    assert state is not None
    assert (await claim_and_load(store, first, now=105.0, owner="w2"))[0] is None  # a live lease
    rec = await store.get_turn(first)
    assert (rec.attempts, rec.lease_owner, rec.attempt_id) == (1, "w1", attempt)
    later, other = await claim_and_load(store, first, now=200.0, owner="w2")  # the lease expired
    assert later.turn.attempts == 2 and later.turn.attempt_id == other
    with pytest.raises(StaleAttemptError):
        await store.atomic(first, attempt, lambda tx: tx.journal(Phase.COMMITTED))  # the old attempt is fenced


async def test_claim_and_load_of_an_absent_turn(store):
    try:  # as ``claim``: None, or NotFound
        state = await store.claim_and_load("nope", owner="w", attempt_id=tid(), now=1.0, lease_seconds=10)
    except NotFound:
        return
    assert state is None


async def test_a_redelivered_turn_loads_its_steps_answers_and_transcript(store):
    turn_id, attempt = await claimed(store)

    def opened(tx):
        tx.append(Message(Role.USER, text="hi", turn_id=turn_id), 0)
        tx.append(Message(Role.ASSISTANT, text="asks", turn_id=turn_id), 1)
        tx.step("model:1", 1)
        tx.emit(ev.MessageCompleted(turn_id, text="asks", index=1))

    await store.atomic(turn_id, attempt, opened)
    await store.atomic(turn_id, attempt, parks(turn_id))
    await store.answer(turn_id, "approve", {"ok": True}, {"by": "u1"})
    state, again = await claim_and_load(store, turn_id, now=300.0)
    assert state.turn.status == TurnStatus.RUNNING and state.turn.attempt_id == again
    assert state.steps == {"model:1"} and state.answers == {"approve": {"ok": True}}
    assert [m.text for m in state.transcript] == ["hi", "asks"]
    assert state.turn.journal["answered"]["input_id"] == "approve"


async def test_claim_and_load_reads_from_the_boundary_or_the_turns_own_opening(store):
    turn_id, attempt = await claimed(store)
    await store.atomic(turn_id, attempt, _history(turn_id, 6))
    await store.atomic(turn_id, attempt, _compact(turn_id, cut=5, at=6, opening=2))
    # the attempt dies; the next claims the turn that compacted inside itself
    state, _ = await claim_and_load(store, turn_id, now=500.0)
    assert (state.base, state.boundary, state.summary) == (2, 5, 6)
    assert [m.text for m in state.transcript] == ["2", "3", "4", "5", "summary"]
    assert state.steps == {"compact:6"}


async def test_the_unit_that_settles_a_turn_hands_the_chain_over(store):
    first, attempt = await claimed(store)
    second, third = tid(), tid()
    await store.create_turn(REF, TurnInput(text="2"), turn_id=second)
    await store.create_turn(REF, TurnInput(text="3"), turn_id=third)
    step = await store.commit(first, attempt, lambda tx: tx.journal(Phase.BEFORE_PROVIDER))
    assert step.runnable == []  # not settled: the chain waits
    running = await store.atomic(first, attempt, lambda tx: tx.settle(TurnStatus.RUNNING))
    assert running.runnable == []
    done = await store.atomic(first, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED, text="ok"))
    assert done.runnable == [(second, REF)]  # the head of the chain, not every queued turn
    state, attempt2 = await claim_and_load(store, second, now=200.0)
    assert state is not None
    failed = await store.commit(second, attempt2, lambda tx: tx.settle(TurnStatus.FAILED, error={"message": "x"}))
    assert failed.runnable == [(third, REF)]
    state, attempt3 = await claim_and_load(store, third, now=300.0)
    last = await store.commit(third, attempt3, lambda tx: tx.settle(TurnStatus.CANCELLED, error={"reason": "r"}))
    assert last.runnable == []  # nothing queued behind it


async def test_a_park_hands_nothing_over(store):
    first, attempt = await claimed(store)
    second = tid()
    await store.create_turn(REF, TurnInput(text="2"), turn_id=second)
    parked = await store.commit(first, attempt, parks(first))
    assert parked.runnable == []  # a parked turn keeps its chain waiting
    assert await store.next_queued(REF) is None
