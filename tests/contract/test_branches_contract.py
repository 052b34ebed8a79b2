"""Branches (``SessionStore.fork``/``switch``), the same suite on every store: a fork shares
the history before its fork point, the new branch's turn loads that and nothing of the branch
left, a switch brings a branch back with its own compaction, and both refuse a busy session."""

from __future__ import annotations

import pytest

from agents_app.runtime import Message, NotFound, Role, TurnConflictError, TurnInput, TurnStatus
from agents_app.runtime import events as ev
from agents_app.runtime.branches import ForkPointError
from agents_app.runtime.errors import SessionBusyError
from tests.contract.test_store_contract import REF, store, tid  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


async def exchange(store, at: int, text: str, reply: str, *, now: float, extra: int = 0) -> str:
    """A turn that opens with ``text`` at position ``at`` and ends with ``reply`` (``extra``
    assistant messages in between); returns its id."""
    turn_id, attempt = tid(), tid()
    await store.create_turn(REF, TurnInput(text=text), turn_id=turn_id)
    assert await store.claim(turn_id, owner="w", attempt_id=attempt, now=now, lease_seconds=10)

    def work(tx):
        tx.append(Message(Role.USER, text=text, turn_id=turn_id), at)
        tx.emit(ev.TurnStarted(turn_id, text=text))
        for i in range(extra):
            tx.append(Message(Role.ASSISTANT, text=f"{reply}-{i}", turn_id=turn_id), at + 1 + i)
        tx.append(Message(Role.ASSISTANT, text=reply, turn_id=turn_id), at + 1 + extra)
        tx.emit(ev.MessageCompleted(turn_id, text=reply, index=at + 1 + extra))
        tx.emit(ev.TurnCompleted(turn_id, text=reply))
        tx.settle(TurnStatus.COMPLETED, text=reply)

    await store.atomic(turn_id, attempt, work)
    return turn_id


async def texts_seen_by(store, turn_id: str, *, now: float) -> list[str]:
    assert await store.claim(turn_id, owner="w", attempt_id=tid(), now=now, lease_seconds=10)
    return [m.text for m in (await store.load(turn_id)).transcript]


async def test_a_fork_shares_the_history_before_its_point_and_sees_nothing_after(store):
    await exchange(store, 0, "q0", "a0", now=100.0)
    second = await exchange(store, 2, "q1", "a1", now=110.0)
    await exchange(store, 4, "q2", "a2", now=120.0)
    left = [e.seq for e in await store.events(REF)]
    edited = tid()
    outcome = await store.fork(REF, TurnInput(text="q1 edited"), turn_id=edited, at=2)
    assert outcome.generation is not None and outcome.generation > 0
    assert outcome.turn is not None and outcome.turn.turn_id == edited and outcome.turn.status == TurnStatus.QUEUED
    assert outcome.turn.generation == outcome.generation
    switched = [e.event for e in outcome.events if e.event.type == "branch.switched"]
    assert switched == [ev.BranchSwitched("", generation=outcome.generation, previous=0, at=2)]
    # the new branch's log: the events before the edited turn's, with their sequence numbers
    logged = await store.events(REF)
    assert [e.seq for e in logged[:-1]] == [s for s in left if s < left[3]]
    assert [e.event.type for e in logged] == ["turn.started", "message.completed", "turn.completed", "branch.switched"]
    assert await texts_seen_by(store, edited, now=200.0) == ["q0", "a0"]
    assert (await store.get_turn(second)).generation == 0  # the branch left is untouched


async def test_a_switch_brings_the_branch_left_back_and_a_turn_there_sees_it(store):
    await exchange(store, 0, "q0", "a0", now=100.0)
    await exchange(store, 2, "q1", "a1", now=110.0)
    edited = tid()
    fork = await store.fork(REF, TurnInput(text="q1 edited"), turn_id=edited, at=2)
    with pytest.raises(SessionBusyError):  # its turn is queued
        await store.switch(REF, 0)
    with pytest.raises(SessionBusyError):
        await store.fork(REF, TurnInput(text="again"), turn_id=tid(), at=0)
    assert await store.claim(edited, owner="w", attempt_id=(attempt := tid()), now=200.0, lease_seconds=10)
    await store.atomic(
        edited,
        attempt,
        lambda tx: (
            tx.append(Message(Role.USER, text="q1 edited", turn_id=edited), 2),
            tx.append(Message(Role.ASSISTANT, text="b1", turn_id=edited), 3),
            tx.settle(TurnStatus.COMPLETED, text="b1"),
        ),
    )
    back = await store.switch(REF, 0)
    assert back.generation == 0
    assert [e.event.type for e in back.events] == ["branch.switched"]
    later = tid()
    await store.create_turn(REF, TurnInput(text="q2"), turn_id=later)
    assert (await store.get_turn(later)).generation == 0
    assert await texts_seen_by(store, later, now=300.0) == ["q0", "a0", "q1", "a1"]
    await store.atomic(
        later, (await store.get_turn(later)).attempt_id, lambda tx: tx.settle(TurnStatus.COMPLETED, text="")
    )
    assert (await store.switch(REF, fork.generation)).generation == fork.generation
    with pytest.raises(NotFound):
        await store.switch(REF, 99)


async def test_regenerate_sends_the_last_opening_again_on_a_new_branch(store):
    first = await exchange(store, 0, "q0", "a0", now=100.0)
    last = await exchange(store, 2, "q1", "a1", now=110.0, extra=2)
    with pytest.raises(TurnConflictError):
        await store.fork(REF, None, turn_id=tid(), regenerate=first)
    again = tid()
    outcome = await store.fork(REF, None, turn_id=again, regenerate=last)
    assert outcome.turn is not None and outcome.turn.input.text == "q1"
    assert await texts_seen_by(store, again, now=200.0) == ["q0", "a0"]


async def test_a_fork_of_a_fork_does_not_copy_the_first_forks_branch_switched(store):
    """Regenerate twice reloaded the chat forever: the second branch held a copy of the first
    fork's ``branch.switched`` (of a generation no longer live), and a page replaying it took
    it for a live switch. A branch's log names only its own switch."""
    await exchange(store, 0, "q0", "a0", now=100.0)
    last = await exchange(store, 2, "q1", "a1", now=110.0)
    for n in range(2):
        again = tid()
        outcome = await store.fork(REF, None, turn_id=again, regenerate=last)
        assert await store.claim(again, owner="w", attempt_id=(attempt := tid()), now=200.0 + n, lease_seconds=10)

        def work(tx, again=again):
            tx.append(Message(Role.USER, text="q1", turn_id=again), 2)
            tx.emit(ev.TurnStarted(again, text="q1"))
            tx.append(Message(Role.ASSISTANT, text=f"b{n}", turn_id=again), 3)
            tx.settle(TurnStatus.COMPLETED, text=f"b{n}")

        await store.atomic(again, attempt, work)
        last = again
    switched = [e.event for e in await store.events(REF) if e.event.type == "branch.switched"]
    assert switched == [ev.BranchSwitched("", generation=outcome.generation, previous=outcome.generation - 1, at=2)]


@pytest.mark.parametrize("at", [1, 2, 4, 50, -1])
async def test_a_fork_point_is_a_message_a_person_sent_to_open_a_turn(store, at):
    await exchange(store, 0, "q0", "a0", now=100.0, extra=1)  # 0 user, 1-2 assistant
    await exchange(store, 3, "q1", "a1", now=110.0)  # 3 user, 4 assistant
    with pytest.raises(ForkPointError):
        await store.fork(REF, TurnInput(text="x"), turn_id=tid(), at=at)
    with pytest.raises(NotFound):
        await store.switch(REF, 5)  # no branch yet: nothing to switch to


def _compacted(turn_id: str, *, cut: int, at: int):
    def work(tx):
        tx.append(Message(Role.SUMMARY, text=f"summary@{at}", turn_id=turn_id, boundary=cut), at)
        tx.step(f"compact:{at}", at, {"boundary": cut, "opening": 0, "reason": "proactive", "messages": cut})
        tx.boundary(cut, at)

    return work


async def compact_after(store, *, cut: int, at: int, now: float) -> None:
    """A compaction by a later turn (the summary at ``at``), which then ends."""
    later, attempt = tid(), tid()
    await store.create_turn(REF, TurnInput(text="compact"), turn_id=later)
    assert await store.claim(later, owner="w", attempt_id=attempt, now=now, lease_seconds=10)
    await store.atomic(later, attempt, _compacted(later, cut=cut, at=at))
    await store.atomic(later, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED, text=""))


async def test_a_fork_after_the_compaction_boundary_keeps_the_summary(store):
    for n in range(3):
        await exchange(store, 2 * n, f"q{n}", f"a{n}", now=100.0 + n)
    await compact_after(store, cut=4, at=6, now=150.0)  # summary of 0..3 at 6, boundary 4
    await exchange(store, 7, "q3", "a3", now=160.0)
    edited = tid()
    await store.fork(REF, TurnInput(text="q3 edited"), turn_id=edited, at=7)
    assert await store.claim(edited, owner="w", attempt_id=tid(), now=200.0, lease_seconds=10)
    state = await store.load(edited)
    assert (state.boundary, state.summary) == (4, 6)
    assert [m.text for m in state.transcript] == ["q2", "a2", "summary@6"]


async def test_a_fork_before_a_compaction_falls_back_to_the_summary_before_it_or_none(store):
    for n in range(3):
        await exchange(store, 2 * n, f"q{n}", f"a{n}", now=100.0 + n)
    await compact_after(store, cut=2, at=6, now=150.0)  # summary@6 of 0..1, boundary 2
    await exchange(store, 7, "q3", "a3", now=160.0)
    await exchange(store, 9, "q4", "a4", now=170.0)
    await compact_after(store, cut=9, at=11, now=180.0)  # summary@11, boundary 9
    await exchange(store, 12, "q5", "a5", now=190.0)
    # at 9: the live summary (11) comes after the fork point; the one at 6 is before it
    older = tid()
    await store.fork(REF, TurnInput(text="q4 edited"), turn_id=older, at=9)
    assert await store.claim(older, owner="w", attempt_id=(attempt := tid()), now=200.0, lease_seconds=10)
    state = await store.load(older)
    assert (state.boundary, state.summary) == (2, 6)
    await store.atomic(older, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED, text=""))
    # at 2: before every summary: the model sees the whole branch, no summary
    first = tid()
    await store.fork(REF, TurnInput(text="q1 edited"), turn_id=first, at=2)
    assert await store.claim(first, owner="w", attempt_id=tid(), now=210.0, lease_seconds=10)
    state = await store.load(first)
    assert (state.boundary, state.summary) == (0, None)
    assert [m.text for m in state.transcript] == ["q0", "a0"]


async def test_a_reset_after_a_fork_takes_a_number_never_used(store):
    await exchange(store, 0, "q0", "a0", now=100.0)
    edited = tid()
    fork = await store.fork(REF, TurnInput(text="q0 edited"), turn_id=edited, at=0)
    assert await store.claim(edited, owner="w", attempt_id=(attempt := tid()), now=200.0, lease_seconds=10)
    await store.atomic(edited, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED, text=""))
    reset = await store.reset(REF)
    assert reset.generation == fork.generation + 1
    with pytest.raises(NotFound):  # a reset starts afresh: the branches are not the new tree's
        await store.switch(REF, 0)
    fresh = tid()
    await store.create_turn(REF, TurnInput(text="new"), turn_id=fresh)
    assert await texts_seen_by(store, fresh, now=300.0) == []
