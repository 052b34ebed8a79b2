"""Crash and replay on the Django store (SQLite or PostgreSQL): stop the engine right after
each commit of a 2-tool-call turn, and also inside the sync tool's unit before its commit;
redeliver; the result equals an uninterrupted run and the sync tool's ORM row exists once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agents_app.models import Order
from agents_app.runtime import (
    Agent,
    ModelRequest,
    RecordingSink,
    ScriptedModel,
    SessionRef,
    TurnExecutor,
    TurnInput,
    TurnStatus,
    reply,
    require_handle,
    tool,
)
from agents_app.runtime.events import MessageDelta
from sessions_app import models as m
from sessions_app.store import DjangoSessionStore

pytestmark = pytest.mark.django_db(transaction=True)
COMMITS = 5  # open, model:1, tool:1:c0, tool:1:c1, model:4 (+ settle)
FIRST, FINAL = "ordering and pinging", "order placed"


class Crash(BaseException):
    """The process dies (nothing in the engine may catch it)."""


class CrashingStore(DjangoSessionStore):
    def __init__(self, *, after: int | None = None, inside: int | None = None) -> None:
        super().__init__()
        self.after, self.inside, self.commits = after, inside, 0

    def atomic_sync(self, turn_id: str, attempt_id: str | None, work: Any):
        return self._crashing(super().atomic_sync, turn_id, attempt_id, work)

    def commit_direct(self, raw: Any, turn_id: str, attempt_id: str | None, work: Any):
        # PostgreSQL: units without tool code commit here, on the store's own connection
        return self._crashing(lambda *a: super(CrashingStore, self).commit_direct(raw, *a), turn_id, attempt_id, work)

    def commit_lite(self, turn_id: str, attempt_id: str | None, work: Any):
        # SQLite: units without tool code commit here, on the store's own connection
        return self._crashing(super().commit_lite, turn_id, attempt_id, work)

    async def claim_and_load(self, turn_id: str, *, opening: Any = None, **kw: Any):
        # SQLite: the opening commits in the claim's transaction, a commit like the others
        if opening is not None and self.inside is not None and self.commits + 1 == self.inside:
            offer = opening

            def dying_offer(state: Any) -> Any:
                work = offer(state)
                if work is None:
                    return None
                self.inside = None

                def dying(tx: Any) -> Any:
                    work(tx)
                    raise Crash("died before the commit")  # the claim rolls back with it

                return dying

            opening = dying_offer
        state = await super().claim_and_load(turn_id, opening=opening, **kw)
        if state is not None and state.opened is not None:
            self.commits += 1
            if self.after is not None and self.commits == self.after:
                self.after = None
                raise Crash(f"died after commit {self.commits}")
        return state

    def _crashing(self, commit_unit: Any, turn_id: str, attempt_id: str | None, work: Any):
        if self.inside is not None and self.commits + 1 == self.inside:
            self.inside = None

            def dying(tx: Any) -> Any:
                work(tx)  # the sync tool's ORM write happens here, inside the transaction...
                raise Crash("died before the commit")  # ...and must roll back with it

            return commit_unit(turn_id, attempt_id, dying)
        commit = commit_unit(turn_id, attempt_id, work)
        self.commits += 1
        if self.after is not None and self.commits == self.after:
            self.after = None
            raise Crash(f"died after commit {self.commits}")
        return commit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def build():
    pings: list[str] = []

    @tool("order", "place an order", {"type": "object", "properties": {"item": {"type": "string"}}})
    def order(input, ctx):
        require_handle(ctx)
        Order.objects.create(item=input["item"], turn_id=ctx.turn_id)
        return {"ordered": input["item"]}

    @tool("ping", "ping a host", {"type": "object", "properties": {"host": {"type": "string"}}})
    async def ping(input, ctx):
        pings.append(ctx.idempotency_key)
        return {"pong": input["host"]}

    def script(request: ModelRequest) -> Any:
        if request.messages[-1].role == "tool":
            return reply(FINAL)
        return reply(FIRST, ("order", {"item": "mug"}), ("ping", {"host": "h"}))

    return Agent("t", "test", tools=[order, ping]), ScriptedModel(script, chunk=3), pings


async def run(store: DjangoSessionStore, key: str) -> dict[str, Any]:
    agent, model, pings = build()
    sink, clock = RecordingSink(), Clock()
    ref = SessionRef("t", key)
    turn_id = uuid.uuid4().hex
    await store.create_turn(ref, TurnInput(text="order a mug and ping h"), turn_id=turn_id)

    def executor() -> TurnExecutor:
        ex = TurnExecutor(
            store=store,
            sink=sink,
            agent_for=lambda n: agent,
            model_for=lambda a: model,
            clock=clock,
            lease_seconds=5,
            retry_delay=0,
        )
        return ex

    for _ in range(3):
        try:
            await executor().drive(turn_id)  # None when a crash came after the final commit
            break
        except Crash:
            clock.now += 10  # the dead attempt's lease expires; the redelivery takes over
    state = await store.load(turn_id)
    return {
        "status": state.turn.status,
        "transcript": [msg.to_json() | {"turn_id": None} for msg in state.transcript],
        "steps": sorted(await sync_to_async(_step_keys)(turn_id)),
        "events": [e.event.to_json() | {"turn_id": None} for e in await store.events(ref)],
        "turn_id": turn_id,
        "pings": len(pings),
        "deltas": "".join(e.text for _, e in sink.deltas if isinstance(e, MessageDelta)),
        "model_calls": model.calls,
    }


def _step_keys(turn_id: str) -> list[str]:
    from sessions_app.selectors import step_keys

    return [k for k in step_keys(turn_id) if not k.startswith("input:")]


def _sync(fn, *args):
    """Run the engine from a sync test; ORM reads stay on this thread (no leaked connections)."""
    from asgiref.sync import async_to_sync

    out = async_to_sync(fn)(*args)
    if isinstance(out, dict) and "turn_id" in out:
        out["orders"] = Order.objects.filter(turn_id=out.pop("turn_id")).count()
    return out


@pytest.fixture
def baseline():
    return _sync(run, DjangoSessionStore(), "base")


@pytest.mark.parametrize("after", range(1, COMMITS + 1))
def test_a_crash_after_each_commit_replays_to_the_same_result(baseline, after):
    got = _sync(run, CrashingStore(after=after), f"crash-after-{after}")
    assert got["status"] == TurnStatus.COMPLETED
    for key in ("transcript", "steps", "events"):
        assert got[key] == baseline[key], key
    assert got["orders"] == 1  # the sync tool's row exists exactly once
    assert got["pings"] >= 1  # the async tool ran at least once
    # a committed model step is never streamed again
    assert got["deltas"].count(FIRST) == 1 and got["deltas"].count(FINAL) == 1
    assert len(set(e["type"] + str(e) for e in got["events"])) == len(got["events"])


@pytest.mark.parametrize("inside", [3])  # the unit that runs the sync tool
def test_a_crash_inside_the_sync_tools_unit_rolls_its_row_back(baseline, inside):
    got = _sync(run, CrashingStore(inside=inside), "crash-inside")
    assert got["status"] == TurnStatus.COMPLETED
    assert got["transcript"] == baseline["transcript"]
    assert got["orders"] == 1  # the rolled-back row did not survive; the replay wrote it once


def test_a_sync_tool_that_writes_then_raises_leaves_no_row():
    @tool("half", "writes then fails", {"type": "object", "properties": {}})
    def half(input, ctx):
        Order.objects.create(item="half-written", turn_id=ctx.turn_id)
        raise ValueError("payment declined")

    model = ScriptedModel([reply("", ("half", {})), reply("sorry")])
    agent = Agent("t", "test", tools=[half])
    store = DjangoSessionStore()

    async def go():
        turn_id = uuid.uuid4().hex
        await store.create_turn(SessionRef("t", "half"), TurnInput(text="go"), turn_id=turn_id)
        ex = TurnExecutor(
            store=store,
            sink=RecordingSink(),
            agent_for=lambda n: agent,
            model_for=lambda a: model,
            clock=Clock(),
            lease_seconds=5,
        )
        return turn_id, await ex.drive(turn_id)

    turn_id, status = _sync(go)
    assert status == TurnStatus.COMPLETED
    assert Order.objects.count() == 0
    tool_msg = m.Message.objects.get(turn_id=turn_id, role="tool").data
    assert tool_msg["result"] == {"error": "ValueError: payment declined"} and tool_msg["is_error"]


def test_a_database_failure_inside_a_sync_tool_is_the_units_not_the_tools():
    """Issue 36 item 7 (a SQLite chaos run once showed a completed turn with no Order row): a
    sync tool's statement that fails because of the database itself (OperationalError: locked
    past the busy timeout, the connection broken by a restart or a killed peer) was handed to
    the model as the tool's error result, and the turn completed without the tool's write — an
    exactly-once tool that ran zero times. Now it is the unit's error: the unit rolls back, the
    attempt ends, and the redelivery runs the tool again; one Order, no error result."""
    from django.db import OperationalError
    from django.db.backends import utils

    failed = []
    real = utils.CursorWrapper._execute

    def locked_once(self, sql, params, *ignored):  # the driver's call: below every execute wrapper
        if "agents_app_order" in sql and sql.lstrip().upper().startswith("INSERT") and not failed:
            failed.append(sql)
            raise OperationalError("database is locked")
        return real(self, sql, params, *ignored)

    agent, model, pings = build()
    store = DjangoSessionStore()

    async def go():
        turn_id = uuid.uuid4().hex
        await store.create_turn(SessionRef("t", "locked"), TurnInput(text="order a mug and ping h"), turn_id=turn_id)
        clock = Clock()
        outcomes = []
        for _ in range(3):
            ex = TurnExecutor(
                store=store,
                sink=RecordingSink(),
                agent_for=lambda n: agent,
                model_for=lambda a: model,
                clock=clock,
                lease_seconds=5,
                retry_delay=0,
            )
            try:
                outcomes.append(await ex.drive(turn_id))
                break
            except OperationalError as exc:  # the attempt ends as after a crash; the lease runs out
                outcomes.append(exc)
                clock.now += 10
        return turn_id, outcomes

    utils.CursorWrapper._execute = locked_once
    try:
        turn_id, outcomes = _sync(go)
    finally:
        utils.CursorWrapper._execute = real
    assert failed, "the wrapper never saw the tool's INSERT"
    assert outcomes[-1] == TurnStatus.COMPLETED, outcomes
    assert Order.objects.filter(turn_id=turn_id).count() == 1
    tool_msgs = [row.data for row in m.Message.objects.filter(turn_id=turn_id, role="tool")]
    assert not any(d.get("is_error") for d in tool_msgs), tool_msgs
