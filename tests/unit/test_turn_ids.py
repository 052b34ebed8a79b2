"""A new turn's id (``new_turn_id``): 32 hex digits as a UUIDv7, later ids sorting later, so
the indexes keyed by turn take new entries at their right edge (bench_engine's storage)."""

from __future__ import annotations

import asyncio
import uuid

from agents_app.runtime import Agent, ScriptedModel, new_turn_id, reply
from sessions_app.web.api import TURN_ID_RE

from ._support import NullDispatcher, make_runtime


def test_a_new_turn_id_is_a_uuid7_the_api_accepts():
    turn_id = new_turn_id()
    assert len(turn_id) == 32 and turn_id == turn_id.lower() and TURN_ID_RE.fullmatch(turn_id)
    parsed = uuid.UUID(turn_id)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert parsed.hex == turn_id


def test_an_id_made_later_sorts_after_one_made_earlier():
    for ms in (0, 1_000, 1_796_000_000_000, (1 << 48) - 2):
        earlier = [new_turn_id(ms) for _ in range(200)]
        later = [new_turn_id(ms + 1) for _ in range(200)]
        assert max(earlier) < min(later)
        assert uuid.UUID(earlier[0]).int >> 80 == ms


def test_ids_of_one_millisecond_differ():
    ids = {new_turn_id(1_796_000_000_000) for _ in range(20_000)}
    assert len(ids) == 20_000  # 74 random bits each


def test_the_host_api_gives_a_new_turn_a_time_ordered_id():
    rt, _, _ = make_runtime(Agent("a"), ScriptedModel([reply("one"), reply("two")]), dispatcher=NullDispatcher())

    async def go() -> list[str]:
        s = rt.session("a", "ids")
        first = await s.start("one")
        await asyncio.sleep(0.002)
        return [first, await s.start("two")]

    first, second = asyncio.run(go())
    assert uuid.UUID(first).version == 7 and uuid.UUID(second).version == 7
    assert first < second


def test_a_short_id_is_the_random_end_of_the_id():
    """Consoles show ids in short by their end: two turns of one millisecond share their first
    12 digits (the time) and never their last 12."""
    from django.template import Context, Template

    from agents_app.runtime import short_turn_id

    first, second = new_turn_id(1_796_000_000_000), new_turn_id(1_796_000_000_000)
    assert first[:12] == second[:12] and short_turn_id(first) != short_turn_id(second)
    assert short_turn_id(first) == "…" + first[-12:] and short_turn_id("t3") == "t3"
    rendered = Template("{% load june_admin %}{{ id|short_id }}").render(Context({"id": first}))
    assert rendered == "…" + first[-12:]
