"""A compacting turn on the Django store (SQLite or PostgreSQL): crash right after each of its
commits and redeliver; the rows equal an uninterrupted run, the summarizing call never runs
again after its commit, and the session row's boundary is the one the summary names."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime import TurnInput
from sessions_app import models as m
from tests.unit.test_compaction_replay import PROACTIVE, REACTIVE, World
from tests.unit.test_replay import REF

from .test_django_replay import Crash, CrashingStore

pytestmark = pytest.mark.django_db(transaction=True)


def rows() -> dict[str, Any]:
    session = m.Session.objects.get()
    return {
        "messages": list(m.Message.objects.order_by("index").values_list("index", "role", "data")),
        "steps": sorted(m.Step.objects.filter(turn_id="t3").values_list("key", "message_index", "data")),
        "events": list(m.Event.objects.order_by("seq").values_list("seq", "type", "data")),
        "turn": m.Turn.objects.filter(pk="t3").values_list("status", "text", "usage", "error").get(),
        "boundary": (session.boundary, session.summary_index),
    }


async def run(kind: str, crash_after: int | None) -> tuple[World, dict[str, Any]]:
    w = World(kind, CrashingStore())  # type: ignore[arg-type]
    await w.history()
    await w.store.create_turn(REF, TurnInput("t3"), turn_id="t3", policy=w.agent.policy_for(None))
    if crash_after is not None:
        w.store.after = w.store.commits + crash_after
        with pytest.raises(Crash):
            await w.drive("t3")
        w.clock.advance(60)
    await w.drive("t3")
    return w, await sync_to_async(rows)()


def _clean() -> None:
    m.Session.objects.all().delete()


@pytest.mark.parametrize(
    "kind,k", [("reactive", k) for k in range(1, REACTIVE + 1)] + [("proactive", k) for k in range(1, PROACTIVE + 1)]
)
async def test_crash_after_every_commit_of_a_compacting_turn_on_django(kind, k):
    base, expected = await run(kind, None)
    assert base.summaries() == 1
    summary = [r for r in expected["messages"] if r[1] == "summary"]
    assert len(summary) == 1 and expected["boundary"] == (summary[0][2]["boundary"], summary[0][0])
    await sync_to_async(_clean)()
    w, got = await run(kind, k)
    # timestamps aside, the rows are the same
    assert got == expected
    assert w.summaries() == 1
    # the next turn loads from the boundary only
    state = await w.store.load("t3")
    assert state.base <= state.boundary == expected["boundary"][0]
