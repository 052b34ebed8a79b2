"""Edit and regenerate as branches, on the engine's fakes: the model is sent exactly the
branch's own history (a scripted model records every request), the branch left comes back
whole, a compaction before the fork point carries over, and a busy session refuses.

The scenarios take their store from ``branch_store``: in memory here; the same functions run on
the Django store in tests/integration/test_branch_context.py."""

from __future__ import annotations

from typing import Any

import pytest

from agents_app.runtime import Agent, InMemorySessionStore, ModelRequest, ScriptedModel, reply
from agents_app.runtime.branches import BranchNode, alternatives, fork_compaction, holder, tree_of
from agents_app.runtime.compaction import Compaction
from agents_app.runtime.errors import SessionBusyError

from ._support import NullDispatcher, make_runtime


@pytest.fixture
def branch_store() -> Any:
    return InMemorySessionStore()


def echo(request: ModelRequest) -> Any:
    if request.purpose == "compact":
        return reply("SUMMARY")
    return reply(f"echo {request.messages[-1].text}")


def seen(request: ModelRequest) -> list[tuple[str, str]]:
    return [(str(m.role), m.text) for m in request.messages]


async def test_the_model_of_a_fork_sees_its_branch_and_nothing_of_the_one_left(branch_store):
    model = ScriptedModel(echo)
    rt, store, _ = make_runtime(Agent("a", "instr"), model, store=branch_store)
    s = rt.session("a", "s1")
    for text in ("one", "two", "three"):
        assert (await s.turn(text, timeout=5)).text == f"echo {text}"
    edited = await s.fork(2, "TWO")  # message 2: "two"
    assert (await s.result(edited.turn_id, timeout=5)).text == "echo TWO"
    assert seen(model.requests[-1]) == [("user", "one"), ("assistant", "echo one"), ("user", "TWO")]
    # a turn on the new branch goes on from it
    assert (await s.turn("four", timeout=5)).text == "echo four"
    assert seen(model.requests[-1]) == [
        ("user", "one"),
        ("assistant", "echo one"),
        ("user", "TWO"),
        ("assistant", "echo TWO"),
        ("user", "four"),
    ]
    # back to the first branch: its turns see it whole, nothing of the fork
    assert await s.switch_branch(0) == 0
    assert (await s.turn("five", timeout=5)).text == "echo five"
    assert seen(model.requests[-1]) == [
        ("user", "one"),
        ("assistant", "echo one"),
        ("user", "two"),
        ("assistant", "echo two"),
        ("user", "three"),
        ("assistant", "echo three"),
        ("user", "five"),
    ]


async def test_regenerate_sends_the_last_message_again_without_its_reply(branch_store):
    replies = iter(["first", "second", "third"])
    model = ScriptedModel(lambda request: reply(next(replies)))
    rt, store, _ = make_runtime(Agent("a", "instr"), model, store=branch_store)
    s = rt.session("a", "s1")
    last = (await s.turn("hello", timeout=5)).turn_id
    again = await s.regenerate(last)
    assert (await s.result(again.turn_id, timeout=5)).text == "second"
    assert seen(model.requests[-1]) == [("user", "hello")]
    await s.switch_branch(0)
    assert (await s.turn("and then?", timeout=5)).text == "third"
    assert seen(model.requests[-1]) == [("user", "hello"), ("assistant", "first"), ("user", "and then?")]


async def test_a_fork_after_a_compaction_sends_the_summary_and_the_kept_tail(branch_store):
    def run(request: ModelRequest) -> Any:
        if request.purpose == "compact":
            return reply("SUMMARY")
        last = request.messages[-1].text
        return reply(f"echo {last}", usage={"input_tokens": 900 if last == "two" else 10})

    model = ScriptedModel(run)
    agent = Agent("a", "instr", compaction={"context_window": 1000, "threshold": 0.5, "keep_last": 1})
    rt, store, _ = make_runtime(agent, model, store=branch_store)
    s = rt.session("a", "s1")
    for text in ("one", "two", "three"):
        await s.turn(text, timeout=5)
    # the log: one, echo one, two, echo two, the summary (4, of 0-1; the boundary at 2), three (5)
    assert [r.purpose for r in model.requests] == ["turn", "turn", "compact", "turn"]
    assert seen(model.requests[-1]) == [
        ("summary", "SUMMARY"),
        ("user", "two"),
        ("assistant", "echo two"),
        ("user", "three"),
    ]
    edited = await s.fork(5, "THREE")  # after the compaction: its summary and kept tail carry over
    await s.result(edited.turn_id, timeout=5)
    assert seen(model.requests[-1]) == [
        ("summary", "SUMMARY"),
        ("user", "two"),
        ("assistant", "echo two"),
        ("user", "THREE"),
    ]
    await s.switch_branch(0)
    edited = await s.fork(2, "TWO")  # before it: no summary, the branch whole
    await s.result(edited.turn_id, timeout=5)
    assert seen(model.requests[-1]) == [("user", "one"), ("assistant", "echo one"), ("user", "TWO")]


async def test_fork_and_switch_refuse_a_busy_session(branch_store):
    dispatcher = NullDispatcher()
    rt, store, _ = make_runtime(Agent("a", "instr"), ScriptedModel(echo), dispatcher=dispatcher, store=branch_store)
    s = rt.session("a", "s1")
    await s.start("queued")
    with pytest.raises(SessionBusyError):
        await s.fork(0, "edit")
    with pytest.raises(SessionBusyError):
        await s.switch_branch(0)


TREE = [BranchNode(0, None, 0), BranchNode(1, 0, 4), BranchNode(2, 1, 6), BranchNode(3, 0, 4), BranchNode(4, 0, 2)]


@pytest.mark.parametrize(
    ("generation", "index", "expected", "current"),
    [
        (0, 4, [0, 1, 3], 0),
        (2, 4, [0, 1, 3], 1),  # message 4 of branch 2 is its parent's
        (2, 6, [1, 2], 2),
        (1, 2, [0, 4], 0),
        (4, 2, [0, 4], 4),
        (0, 0, [0], 0),
    ],
)
def test_alternatives_at_a_message(generation, index, expected, current):
    assert alternatives(TREE, generation, index) == expected
    assert holder(TREE, generation, index) == current


def test_a_tree_and_the_compaction_a_fork_takes():
    assert tree_of(TREE, 2) == {0, 1, 2, 3, 4} and tree_of(TREE, 9) == {9}
    assert fork_compaction([(6, 2), (11, 9)], 12) == (9, 11)
    assert fork_compaction([(6, 2), (11, 9)], 9) == (2, 6)
    assert fork_compaction([(6, 2), (11, 9)], 6) == (0, None)
