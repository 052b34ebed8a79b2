"""The demo model's small window: a new user sees compaction within a dozen messages, and a
session fed one proactive seed a day lives on (in-process, on the in-memory store)."""

from __future__ import annotations

from agents_app.loader import BUILTIN_DIR, load_agent
from agents_app.providers.demo import CONTEXT_WINDOW, DemoModel, summarize
from agents_app.runtime import ModelRequest, Role, TurnInput, TurnStatus
from agents_app.runtime.compaction import summary_request, view_tokens
from agents_app.runtime.messages import Message

from ._support import logged, make_runtime


class CountingDemo(DemoModel):
    def __init__(self) -> None:
        super().__init__(delay=0, essay_delay=0)
        self.requests: list[ModelRequest] = []

    async def stream(self, request):  # type: ignore[override]
        self.requests.append(request)
        async for chunk in super().stream(request):
            yield chunk


def test_the_demo_summary_is_deterministic_and_short():
    part = [Message(Role.USER, text=f"message number {i} " * 5) for i in range(10)]
    request = summary_request(part, load_agent(BUILTIN_DIR / "ops").compaction, CONTEXT_WINDOW)
    assert summarize(request) == summarize(request)
    assert "10 messages" in summarize(request) and len(summarize(request)) < 400


async def test_essays_compact_within_a_dozen_messages():
    agent = load_agent(BUILTIN_DIR / "ops")
    model = CountingDemo()
    rt, store, _ = make_runtime(agent, model)
    s = rt.session("ops", "new-user")
    for n in range(6):  # 12 messages
        assert (await s.turn("essay please", timeout=10)).status == TurnStatus.COMPLETED
    done = await logged(store, s.ref, "compaction.completed")
    assert done, "no compaction within a dozen messages"
    assert done[0].messages >= 4 and done[0].tokens_after < done[0].tokens_before
    assert all(view_tokens(r.system, r.messages) <= CONTEXT_WINDOW for r in model.requests)


async def test_a_daily_seed_session_stays_alive_for_a_year():
    agent = load_agent(BUILTIN_DIR / "ops")
    model = CountingDemo()
    rt, store, _ = make_runtime(agent, model)
    s = rt.session("ops", "ops-inbox")
    for day in range(365):
        seed = TurnInput("summary of today", kind="proactive", by="cron:daily-summary", source="schedule")
        assert (await s.turn(seed, timeout=10)).status == TurnStatus.COMPLETED, day
    assert len(await logged(store, s.ref, "compaction.completed")) >= 3
    assert max(view_tokens(r.system, r.messages) for r in model.requests) <= CONTEXT_WINDOW
    # the message log kept every day; a turn loads from the boundary only
    assert sum(1 for m in store.transcript(s.ref) if m.role == Role.TRIGGER) == 365
    last = (await store.events(s.ref))[-1].event.turn_id
    assert len((await store.load(last)).transcript) < 100
