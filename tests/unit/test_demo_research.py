"""The demo: ``research <topic>`` on the ops agent delegates to one researcher child, ``research
<a> and <b>`` to two in parallel, on the offline demo model (what a new user sees)."""

from __future__ import annotations

from agents_app.loader import BUILTIN_DIR, load_agent
from agents_app.providers.demo import DemoModel
from agents_app.runtime import InMemorySessionStore, Runtime, TurnInput, TurnStatus


def runtime() -> Runtime:
    agents = {name: load_agent(BUILTIN_DIR / name) for name in ("ops", "researcher")}
    return Runtime(store=InMemorySessionStore(), agents=agents, model_for=lambda a: DemoModel(delay=0))


async def test_research_one_topic_delegates_to_one_researcher(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    rt = runtime()
    s = rt.session("ops", "demo")
    res = await s.result(await s.start(TurnInput("research tides", user={"id": "1", "attested": True})), timeout=5)
    assert res.status == TurnStatus.COMPLETED
    assert res.text.startswith("Research done. tides: Findings on tides: tides ")
    children = [t.record for t in rt.store._turns.values() if t.record.parent == res.turn_id]
    assert [(c.session.agent, c.status) for c in children] == [("researcher", TurnStatus.COMPLETED)]
    child_tools = [m.name for m in rt.store.transcript(children[0].session) if m.role == "tool"]
    assert child_tools == ["search_notes"]


async def test_research_two_topics_runs_two_researchers(monkeypatch, settings):
    settings.JUNE_DEMO_DELAY = 0.0
    rt = runtime()
    s = rt.session("ops", "demo")
    res = await s.result(await s.start("research tides and harbours"), timeout=5)
    assert res.status == TurnStatus.COMPLETED
    assert "tides: Findings on tides" in res.text and "harbours: Findings on harbours" in res.text
    children = [t.record for t in rt.store._turns.values() if t.record.parent == res.turn_id]
    assert sorted(c.input.target["goal"] for c in children) == ["harbours", "tides"]
    assert rt.store._turns[res.turn_id].record.usage["output_tokens"] > sum(c.usage["output_tokens"] for c in children)
