"""The demo agents' tools are bounded (issue 36, item 5): nothing a demo tool waits on runs past a
fixed maximum, and a cancel stops the `wait` at once (it held a worker for the rest of a
`wait 90` cancelled after 3 s)."""

from __future__ import annotations

import asyncio
import time

from agents_app.loader import BUILTIN_DIR, load_agent
from agents_app.providers.demo import DemoModel
from agents_app.runtime import CANCELLED_RESULT, InMemorySessionStore, Runtime, TurnStatus
from agents_app.runtime.tools import validate_input

from ._support import wait_until

AGENTS = {name: load_agent(BUILTIN_DIR / name) for name in ("ops", "researcher")}


def test_the_demo_wait_takes_at_most_120_seconds():
    wait = AGENTS["ops"].tools["wait"]
    assert validate_input(wait.spec, {"seconds": 120}) is None
    assert "120" in validate_input(wait.spec, {"seconds": 121})
    assert "at most 120" in wait.spec.description


async def test_search_notes_waits_no_longer_than_its_maximum(monkeypatch, settings):
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    settings.JUNE_DEMO_DELAY = 1000.0
    monkeypatch.setattr(asyncio, "sleep", sleep)
    result = await AGENTS["researcher"].tools["search_notes"].run({"query": "tides"}, None)
    assert result["query"] == "tides" and slept == [5.0]


def runtime() -> Runtime:
    return Runtime(store=InMemorySessionStore(), agents=AGENTS, model_for=lambda a: DemoModel(delay=0))


async def test_a_cancel_stops_the_demo_wait_at_once():
    rt = runtime()
    s = rt.session("ops", "w1")
    tid = await s.start("wait 90")
    await wait_until(lambda: any(m.tool_calls for m in rt.store.transcript(s.ref)))  # in the tool
    started = time.monotonic()
    await s.cancel(tid)
    res = await s.result(tid, timeout=5)
    assert res.status == TurnStatus.CANCELLED and time.monotonic() - started < 1.0
    assert [(m.name, m.result) for m in rt.store.transcript(s.ref) if m.role == "tool"] == [("wait", CANCELLED_RESULT)]


async def test_a_wait_past_the_maximum_is_an_error_the_model_reads():
    rt = runtime()
    s = rt.session("ops", "w1")
    res = await s.result(await s.start("wait 600"), timeout=5)
    assert res.status == TurnStatus.COMPLETED and "greater than the maximum of 120" in res.text
