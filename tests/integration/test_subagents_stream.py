"""Child turns in the parent's websocket stream (subagents): every child's events arrive wrapped
with a reference to the child, live (text deltas included) and after a reload."""

from __future__ import annotations

import asyncio

import pytest

from agents_app.runtime import LocalDispatcher, TurnInput, TurnStatus
from sessions_app import wiring

from .test_consumers import communicator, cookie_for, make_user, receive_until_ready

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


class HeldChildren(LocalDispatcher):
    """Runs the parent's turns at once and holds every other session's (the children) until
    ``release`` is set."""

    def __init__(self, parent_key: str, release: asyncio.Event) -> None:
        super().__init__()
        self.parent_key, self.release = parent_key, release

    async def _run(self, turn_id: str, session) -> None:
        if session.key != self.parent_key:
            await self.release.wait()
        await super()._run(turn_id, session)


async def run_tree(user, key: str, text: str, dispatcher: LocalDispatcher | None = None) -> str:
    rt = wiring.runtime(dispatcher=dispatcher or LocalDispatcher())
    s = rt.session("ops", key)
    rec = await s.start_turn(
        TurnInput(text, source="web", user={"id": str(user.pk), "attested": True}), created_by=user
    )
    res = await s.result(rec.turn_id, timeout=30)
    assert res.status == TurnStatus.COMPLETED, res
    await rt.dispatcher.idle()
    return rec.turn_id


def by_child(frames: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in frames:
        if f["type"] == "child.event":
            out.setdefault(f["child"]["goal"], []).append(f["event"]["type"])
    return out


@pytest.mark.usefixtures("settled")  # a consumer left on the loop is stopped (tests/settle.py)
async def test_a_reload_replays_each_childs_events_under_its_reference():
    user = await make_user("relay1")
    turn_id = await run_tree(user, "r1", "research tides and harbours")
    comm = communicator("/ws/agents/ops/sessions/r1/", await cookie_for(user))
    connected, _ = await comm.connect()
    assert connected
    frames = await receive_until_ready(comm)
    own = [f["type"] for f in frames if "seq" in f]
    assert own.count("child.started") == 2 and own[-1] == "turn.completed"
    children = by_child(frames)
    assert set(children) == {"tides", "harbours"}
    for types in children.values():
        assert types[0] == "turn.started" and types[-1] == "turn.completed"
        assert "action.requested" in types and "action.completed" in types  # the child's tool call
    refs = [f["child"] for f in frames if f["type"] == "child.event"]
    assert all(r["parent_turn"] == turn_id and r["agent"] == "researcher" for r in refs)
    await comm.disconnect()


@pytest.mark.usefixtures("settled")  # a consumer left on the loop is stopped (tests/settle.py)
async def test_live_child_events_and_deltas_arrive_in_the_parent_stream():
    user = await make_user("relay2")
    comm = communicator("/ws/agents/ops/sessions/r2/", await cookie_for(user))
    connected, _ = await comm.connect()
    assert connected
    await receive_until_ready(comm)
    # A child's text deltas are live only (at most once, like the session's own): the ones sent
    # before the consumer follows the child are not for it. The consumer follows a child when
    # it forwards its ``child.started``, and it handles one message at a time, so once it has
    # answered a frame sent after that ``child.started``, it has joined the child's group: only
    # then does the child run (a fast child could otherwise stream its reply before the join).
    release = asyncio.Event()
    task = asyncio.ensure_future(run_tree(user, "r2", "research tides", HeldChildren("r2", release)))
    frames: list[dict] = []
    while not any(f.get("type") == "turn.completed" and "seq" in f for f in frames):
        frame = await comm.receive_json_from(timeout=30)
        frames.append(frame)
        if frame.get("type") == "child.started" and "seq" in frame:
            await comm.send_json_to({"type": "sync?", "id": "after-child-started"})
        elif frame.get("type") == "error" and frame.get("id") == "after-child-started":
            release.set()
    await task
    assert release.is_set()
    assert by_child(frames)["tides"][-1] == "turn.completed"
    deltas = "".join(
        f["event"]["text"]
        for f in frames
        if f["type"] == "child.delta" and f["event"]["offset"] >= 0 and not f["event"].get("snapshot")
    )
    assert "Findings on tides" in deltas
    await comm.disconnect()
