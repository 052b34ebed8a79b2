"""ONE SessionStore suite, run against every store: in-memory, and the Django store on the
database of this run (SQLite, or PostgreSQL when DATABASE_URL points at it) by each of its paths
(``sessions_app/store/paths.py``): the one chosen for the database (``lite`` or ``direct``), the
runner's (``piped`` on PostgreSQL), and the thread path alone."""

from __future__ import annotations

import uuid

import pytest

from agents_app.runtime import (
    InMemorySessionStore,
    Message,
    NotFound,
    Phase,
    Role,
    SessionRef,
    SessionSuspendedError,
    StaleAttemptError,
    TurnConflictError,
    TurnInput,
    TurnNotResumable,
    TurnStatus,
)
from agents_app.runtime import events as ev

REF = SessionRef("ops", "contract")


# the Django store runs its units on another thread: it needs real transactions
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["memory", "django", "django-commit", "django-host", "django-runner", "django-thread"])
def store(request):
    if request.param == "memory":
        return InMemorySessionStore()
    from sessions_app.store import DjangoSessionStore

    if request.param == "django":  # the path chosen for this database (paths.choose: lite or direct)
        return DjangoSessionStore()
    if request.param == "django-thread":  # every call on Django's connection and its thread
        return DjangoSessionStore(path="thread")
    if request.param == "django-host":  # as the services call it: host operations on Django's connection
        return DjangoSessionStore(own_connection=False)
    if request.param == "django-runner":  # as a worker's runner builds it: pipes and a pool of threads
        return request.getfixturevalue("runner_store")

    class EveryUnitCommitted(DjangoSessionStore):
        """Every unit as the engine sends one that only records through the Tx (``commit``;
        on PostgreSQL the store runs those differently from ``atomic``)."""

        async def atomic(self, turn_id, attempt_id, work):
            return await self.commit(turn_id, attempt_id, work)

    return EveryUnitCommitted()


async def step_keys(store, turn_id: str) -> set[str]:
    """The memoized step ids of a turn (not part of the Protocol: the loop reads its position
    off the transcript; the memo is for the admin, the archive and answers)."""
    if isinstance(store, InMemorySessionStore):
        return {k for k in store.steps(turn_id) if not k.startswith("input:")}
    from asgiref.sync import sync_to_async

    from sessions_app.selectors import step_keys

    keys = await sync_to_async(step_keys)(turn_id)
    return {k for k in keys if not k.startswith("input:")}


def tid() -> str:
    return uuid.uuid4().hex


async def claimed(store, ref=REF, text="hi", now=100.0, **kw):
    turn_id = tid()
    await store.create_turn(ref, TurnInput(text=text), turn_id=turn_id, **kw)
    attempt = uuid.uuid4().hex
    rec = await store.claim(turn_id, owner="w1", attempt_id=attempt, now=now, lease_seconds=10)
    assert rec is not None
    return turn_id, attempt


async def test_create_and_get_turn(store):
    turn_id = tid()
    rec = (
        await store.create_turn(
            REF, TurnInput(text="hello", source="web"), turn_id=turn_id, policy={"system": "s", "deny_tools": []}
        )
    ).turn
    assert rec.status == TurnStatus.QUEUED
    got = await store.get_turn(turn_id)
    assert got.input.text == "hello" and got.input.source == "web"
    assert got.policy == {"system": "s", "deny_tools": []}
    with pytest.raises(NotFound):
        await store.get_turn("nope")
    with pytest.raises(TurnConflictError):
        await store.create_turn(REF, TurnInput(text="again"), turn_id=turn_id)


async def test_unit_of_work_commits_messages_steps_events_together(store):
    turn_id, attempt = await claimed(store)

    def work(tx):
        tx.append(Message(Role.USER, text="hi", turn_id=turn_id), 0)
        tx.append(Message(Role.ASSISTANT, text="hello", turn_id=turn_id), 1)
        tx.step("model:1", 1)
        tx.emit(ev.MessageCompleted(turn_id, text="hello", index=1))
        tx.emit(ev.TurnCompleted(turn_id, text="hello"))
        tx.journal(Phase.COMMITTED)
        tx.settle(TurnStatus.COMPLETED, text="hello", usage={"output_tokens": 3})

    commit = await store.atomic(turn_id, attempt, work)
    assert [e.event.type for e in commit.events] == ["message.completed", "turn.completed"]
    assert commit.events[1].seq == commit.events[0].seq + 1
    state = await store.load(turn_id)
    assert [m.text for m in state.transcript] == ["hi", "hello"]
    assert await step_keys(store, turn_id) == {"model:1"}
    assert state.turn.status == TurnStatus.COMPLETED and state.turn.text == "hello"
    assert state.turn.usage == {"output_tokens": 3}
    assert state.turn.phase == Phase.COMMITTED
    logged = await store.events(REF)
    assert [e.seq for e in logged] == [e.seq for e in commit.events]


async def test_a_raising_unit_writes_nothing(store):
    turn_id, attempt = await claimed(store)

    def work(tx):
        tx.append(Message(Role.USER, text="hi", turn_id=turn_id), 0)
        tx.emit(ev.TurnStarted(turn_id))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await store.atomic(turn_id, attempt, work)
    state = await store.load(turn_id)
    assert state.transcript == [] and await store.events(REF) == []


async def test_fencing_refuses_a_stale_attempt(store):
    turn_id, attempt = await claimed(store, now=100.0)
    # the lease expires; another worker takes over
    other = uuid.uuid4().hex
    assert await store.claim(turn_id, owner="w2", attempt_id=other, now=200.0, lease_seconds=10) is not None

    def work(tx):
        tx.append(Message(Role.USER, text="stale", turn_id=turn_id), 0)
        tx.emit(ev.TurnStarted(turn_id))

    with pytest.raises(StaleAttemptError):
        await store.atomic(turn_id, attempt, work)
    with pytest.raises(StaleAttemptError):
        await store.heartbeat(turn_id, attempt_id=attempt, now=201.0, lease_seconds=10)
    try:  # a store may send the journal without waiting: its refusal surfaces at the next unit
        await store.journal(turn_id, attempt, Phase.PROVIDER_STARTED, stream_key="k")
    except StaleAttemptError:
        pass
    with pytest.raises(StaleAttemptError):
        await store.commit(turn_id, attempt, work)
    state = await store.load(turn_id)
    assert state.transcript == []
    assert state.turn.journal.get("attempt_id") != attempt  # the stale journal write was refused too
    await store.atomic(turn_id, other, work)
    assert [m.text for m in (await store.load(turn_id)).transcript] == ["stale"]


async def test_a_live_lease_is_not_taken(store):
    turn_id, _ = await claimed(store, now=100.0)
    assert await store.claim(turn_id, owner="w2", attempt_id=tid(), now=105.0, lease_seconds=10) is None
    rec = await store.get_turn(turn_id)
    assert rec.attempts == 1 and rec.lease_owner == "w1"


async def test_heartbeat_extends_the_lease_and_reports_cancel(store):
    turn_id, attempt = await claimed(store, now=100.0)
    assert await store.heartbeat(turn_id, attempt_id=attempt, now=108.0, lease_seconds=10) is None
    assert await store.claim(turn_id, owner="w2", attempt_id=tid(), now=115.0, lease_seconds=10) is None
    await store.request_cancel(turn_id, "requested")
    assert await store.heartbeat(turn_id, attempt_id=attempt, now=116.0, lease_seconds=10) == "requested"


async def test_turn_chain_claims_in_order(store):
    first, second = tid(), tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=first)
    await store.create_turn(REF, TurnInput(text="2"), turn_id=second)
    assert await store.next_queued(REF) == first
    assert await store.claim(second, owner="w", attempt_id=tid(), now=1.0, lease_seconds=10) is None
    attempt = tid()
    assert await store.claim(first, owner="w", attempt_id=attempt, now=1.0, lease_seconds=10) is not None
    assert await store.next_queued(REF) is None  # the chain's head is running
    await store.atomic(first, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED))
    assert await store.next_queued(REF) == second
    assert await store.claim(second, owner="w", attempt_id=tid(), now=2.0, lease_seconds=10) is not None


async def test_release_requeues(store):
    turn_id, attempt = await claimed(store)
    await store.release(turn_id, attempt_id=attempt)
    assert (await store.get_turn(turn_id)).status == TurnStatus.QUEUED
    assert await store.claim(turn_id, owner="w2", attempt_id=tid(), now=101.0, lease_seconds=10) is not None
    assert (await store.get_turn(turn_id)).attempts == 2


async def test_cancel_of_a_queued_turn_is_immediate(store):
    first, second = tid(), tid()
    await store.create_turn(REF, TurnInput(text="1"), turn_id=first)
    await store.create_turn(REF, TurnInput(text="2"), turn_id=second)
    outcome = await store.request_cancel(second, "requested")
    assert outcome.turn.status == TurnStatus.CANCELLED and outcome.running == []
    assert [e.event.type for e in outcome.events] == ["turn.cancelled"]
    assert [e.event.type for e in await store.events(REF)] == ["turn.cancelled"]
    running, attempt = first, tid()
    await store.claim(running, owner="w", attempt_id=attempt, now=1.0, lease_seconds=10)
    outcome = await store.request_cancel(running, "requested")
    assert outcome.turn.status == TurnStatus.RUNNING and outcome.turn.cancel_reason == "requested"
    assert outcome.running == [running] and outcome.events == []
    again = await store.request_cancel(running, "requested")
    assert again.running == [] and again.turn.cancel_reason == "requested"  # the first request wins
    commit = await store.atomic(running, attempt, lambda tx: None)
    assert commit.cancel_reason == "requested"
    # a unit that logs events hears it too (on SQLite its events' numbering answers it, not its fence)
    for run in (store.commit, store.atomic):
        commit = await run(running, attempt, lambda tx: tx.emit(ev.MessageCompleted(running, text="x")))
        assert commit.cancel_reason == "requested" and [e.event.type for e in commit.events] == ["message.completed"]


async def test_replace_cancels_unfinished_turns(store):
    running, attempt = await claimed(store)
    queued = tid()
    await store.create_turn(REF, TurnInput(text="q"), turn_id=queued)
    newest = tid()
    outcome = await store.create_turn(REF, TurnInput(text="new"), turn_id=newest, replace=True)
    assert [(e.event.type, e.event.turn_id) for e in outcome.events] == [("turn.cancelled", queued)]
    assert outcome.running == [running] and outcome.turn.turn_id == newest
    assert (await store.get_turn(queued)).status == TurnStatus.CANCELLED
    assert (await store.get_turn(running)).cancel_reason == "replaced"
    assert (await store.get_turn(newest)).status == TurnStatus.QUEUED


async def park(store, turn_id, attempt, request=None):
    request = request or {"id": "approve", "prompt": "ok?", "schema": {"type": "boolean"}, "answerers": None}

    def work(tx):
        tx.append(Message(Role.USER, text="hi", turn_id=turn_id), 0)
        tx.emit(ev.InputRequested(turn_id, request=request, call_id="c0"))
        tx.journal(Phase.PARKED, call_id="c0")
        tx.settle(TurnStatus.SUSPENDED, pending={"request": request, "call_id": "c0"})

    await store.atomic(turn_id, attempt, work)


async def test_park_answer_and_one_park_per_session(store):
    turn_id, attempt = await claimed(store)
    await park(store, turn_id, attempt)
    pending = await store.pending(REF)
    assert [p["turn_id"] for p in pending] == [turn_id] and pending[0]["request"]["id"] == "approve"
    with pytest.raises(SessionSuspendedError):
        await store.create_turn(REF, TurnInput(text="other"), turn_id=tid())
    with pytest.raises(TurnConflictError):
        await store.answer(turn_id, "wrong-id", True, {"by": "u1"})
    outcome = await store.answer(turn_id, "approve", True, {"by": "u1"})
    assert outcome.turn.status == TurnStatus.QUEUED
    assert [e.event.type for e in outcome.events] == ["input.answered", "turn.started"]
    state = await store.load(turn_id)
    assert state.answers == {"approve": True}
    assert await store.pending(REF) == []
    types = [e.event.type for e in await store.events(REF)]
    assert types[-3:] == ["input.requested", "input.answered", "turn.started"]
    with pytest.raises(TurnNotResumable):
        await store.answer(turn_id, "approve", False, {"by": "u1"})


async def test_reset_archives_and_starts_a_new_generation(store):
    turn_id, attempt = await claimed(store)
    await store.atomic(
        turn_id,
        attempt,
        lambda tx: (tx.append(Message(Role.USER, text="old", turn_id=turn_id), 0), tx.emit(ev.TurnStarted(turn_id))),
    )
    queued = tid()
    await store.create_turn(REF, TurnInput(text="q"), turn_id=queued)
    outcome = await store.reset(REF)
    assert outcome.previous_session == "contract#g0" and outcome.generation == 1
    assert outcome.running == [turn_id]
    assert [e.event.type for e in outcome.events] == ["turn.cancelled", "session.reset"]
    assert (await store.get_turn(queued)).status == TurnStatus.CANCELLED
    assert (await store.get_turn(turn_id)).cancel_reason == "reset"
    assert [e.event.type for e in await store.events(REF)] == ["session.reset"]
    fresh, fresh_attempt = tid(), tid()
    await store.create_turn(REF, TurnInput(text="new"), turn_id=fresh)
    # the old turn still runs (until its next boundary) and writes into its own generation
    await store.atomic(turn_id, attempt, lambda tx: tx.settle(TurnStatus.CANCELLED))
    assert await store.claim(fresh, owner="w", attempt_id=fresh_attempt, now=300.0, lease_seconds=10)
    assert (await store.load(fresh)).transcript == []


async def test_reset_of_a_parked_session_archives_the_park(store):
    turn_id, attempt = await claimed(store)
    await park(store, turn_id, attempt)
    await store.reset(REF)
    assert await store.pending(REF) == []
    assert (await store.get_turn(turn_id)).status == TurnStatus.CANCELLED
    with pytest.raises(TurnNotResumable):
        await store.answer(turn_id, "approve", True, {"by": "u1"})
    await store.create_turn(REF, TurnInput(text="after"), turn_id=tid())  # no longer suspended


async def test_events_after_a_sequence_number(store):
    turn_id, attempt = await claimed(store)
    for n in range(5):
        await store.atomic(turn_id, attempt, lambda tx, n=n: tx.emit(ev.MessageCompleted(turn_id, text=str(n))))
    logged = await store.events(REF)
    assert [e.event.text for e in logged] == ["0", "1", "2", "3", "4"]
    later = await store.events(REF, after=logged[2].seq)
    assert [e.event.text for e in later] == ["3", "4"]
    assert [e.event.text for e in await store.events(REF, after=0, limit=2)] == ["0", "1"]


async def test_a_position_is_taken_once(store):
    turn_id, attempt = await claimed(store)
    await store.atomic(turn_id, attempt, lambda tx: tx.append(Message(Role.USER, text="a", turn_id=turn_id), 0))
    with pytest.raises(Exception):
        await store.atomic(turn_id, attempt, lambda tx: tx.append(Message(Role.USER, text="b", turn_id=turn_id), 0))
    assert [m.text for m in (await store.load(turn_id)).transcript] == ["a"]


async def test_a_park_gives_its_attempt_back_a_crash_does_not(store):
    """Pins "retry budget exhausted after 5 attempts" for a tool that asked five questions
    (issue 13, item 10): every claim counted, the claims after resumes too. An attempt that
    parks settled; only attempts that ended without settling spend the budget."""
    turn_id, attempt = await claimed(store)
    assert (await store.get_turn(turn_id)).attempts == 1
    for n in range(6):
        await _park_again(store, turn_id, attempt, n)
        assert (await store.get_turn(turn_id)).attempts == 0, "the parked attempt is not counted"
        await store.answer(turn_id, f"q{n}", True, {"by": "u1"})
        attempt = uuid.uuid4().hex
        rec = await store.claim(turn_id, owner="w1", attempt_id=attempt, now=100.0, lease_seconds=10)
        assert rec.attempts == 1
    # an attempt that dies holding the lease (no unit settles it) stays counted
    crashed = uuid.uuid4().hex
    assert (await store.claim(turn_id, owner="w2", attempt_id=crashed, now=200.0, lease_seconds=10)).attempts == 2


async def _park_again(store, turn_id, attempt, n):
    request = {"id": f"q{n}", "prompt": "ok?", "schema": {"type": "boolean"}, "answerers": None}

    def work(tx):
        tx.emit(ev.InputRequested(turn_id, request=request, call_id="c0"))
        tx.journal(Phase.PARKED, call_id="c0")
        tx.settle(TurnStatus.SUSPENDED, pending={"request": request, "call_id": "c0"})

    await store.atomic(turn_id, attempt, work)


# --- compaction: the boundary ----------------------------------------------------------------


def _history(turn_id, n):
    def work(tx):
        for i in range(n):
            role = Role.USER if i % 2 == 0 else Role.ASSISTANT
            tx.append(Message(role, text=str(i), turn_id=turn_id), i)

    return work


def _compact(turn_id, cut, at, opening=0):
    def work(tx):
        tx.append(Message(Role.SUMMARY, text="summary", turn_id=turn_id, boundary=cut), at)
        tx.step(f"compact:{at}", at, {"boundary": cut, "opening": opening, "reason": "proactive", "messages": cut})
        tx.boundary(cut, at)
        tx.emit(ev.CompactionCompleted(turn_id, boundary=cut, index=at, summary="summary"))

    return work


async def test_a_boundary_moves_with_its_unit_and_loads_read_from_it(store):
    turn_id, attempt = await claimed(store)
    await store.atomic(turn_id, attempt, _history(turn_id, 6))
    await store.commit(turn_id, attempt, _compact(turn_id, cut=4, at=6, opening=4))
    await store.atomic(turn_id, attempt, lambda tx: tx.settle(TurnStatus.COMPLETED))
    later, later_attempt = await claimed(store, now=200.0)
    state = await store.load(later)
    assert (state.base, state.boundary, state.summary) == (4, 4, 6)
    assert [m.text for m in state.transcript] == ["4", "5", "summary"]
    assert state.transcript[-1].role == Role.SUMMARY and state.transcript[-1].boundary == 4

    # a unit that raises moves nothing
    def raising(tx):
        tx.boundary(5, 7)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await store.atomic(later, later_attempt, raising)
    assert (await store.load(later)).boundary == 4


async def test_a_turn_that_compacted_inside_itself_loads_from_its_opening(store):
    turn_id, attempt = await claimed(store)
    await store.atomic(turn_id, attempt, _history(turn_id, 6))
    await store.atomic(turn_id, attempt, _compact(turn_id, cut=5, at=6, opening=2))
    state = await store.load(turn_id)
    assert (state.base, state.boundary, state.summary) == (2, 5, 6)
    assert [m.text for m in state.transcript] == ["2", "3", "4", "5", "summary"]


async def test_a_stale_attempt_moves_no_boundary(store):
    turn_id, attempt = await claimed(store, now=100.0)
    await store.atomic(turn_id, attempt, _history(turn_id, 4))
    other = tid()
    assert await store.claim(turn_id, owner="w2", attempt_id=other, now=200.0, lease_seconds=10)
    for unit in (store.atomic, store.commit):
        with pytest.raises(StaleAttemptError):
            await unit(turn_id, attempt, _compact(turn_id, cut=2, at=4))
    state = await store.load(turn_id)
    assert (state.base, state.boundary, state.summary) == (0, 0, None) and len(state.transcript) == 4


async def test_reset_sets_the_boundary_back_and_an_archived_turn_moves_none(store):
    turn_id, attempt = await claimed(store)
    await store.atomic(turn_id, attempt, _history(turn_id, 4))
    await store.reset(REF)
    # the old turn, still running in the archived generation, compacts its own transcript
    await store.atomic(turn_id, attempt, _compact(turn_id, cut=2, at=4))
    await store.atomic(turn_id, attempt, lambda tx: tx.settle(TurnStatus.CANCELLED))
    fresh, _ = await claimed(store, now=300.0)
    state = await store.load(fresh)
    assert (state.base, state.boundary, state.summary, state.transcript) == (0, 0, None, [])
