"""Long sessions on the Django store (SQLite, or PostgreSQL with DATABASE_URL), in-process with
the worker's executor (lease, heartbeat, fenced checkpoints; no django-q2 hop):

- a session driven through 1,000 turns by a scripted model reporting realistic usage never
  fails for overflow, compacts again and again, and keeps loading a bounded transcript;
- the ops agent's daily-summary schedule, 365 simulated days through its channel (the demo
  model's small window), keeps its session alive and inside the window.

Through real qcluster workers (200 turns by default, JUNE_COMPACTION_TURNS=1000 for all):
tests/fault/test_compaction_workers.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from agents_app import providers
from agents_app.providers.demo import CONTEXT_WINDOW, DemoModel
from agents_app.runtime.compaction import view_tokens
from sessions_app import models as m
from sessions_app import services, wiring
from sessions_app.store import direct
from tests.fault.qcluster import AGENTS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def compact_agent(settings):
    settings.JUNE_AGENT_DIRS = [str(AGENTS)]
    wiring.agents.cache_clear()
    yield "compactagent"
    wiring.agents.cache_clear()


@pytest.mark.slow
def test_a_thousand_turns_never_fail_for_overflow(compact_agent, monkeypatch):
    monkeypatch.setattr("sessions_app.outbox.queue.async_task", lambda *a, **kw: None)  # driven below, in-process

    async def thousand() -> str:
        # one event loop (one thread) for every turn, as a worker's: the store's own connection
        # is the loop thread's, opened once; the executor is what sessions_app.workers.tasks.run_turn
        # drives, minus the queue
        executor = wiring.executor()
        turn_id = ""
        try:
            for n in range(1000):
                text = f"turn {n}" + (":tool" if n % 5 == 0 else "")
                turn_id = (
                    await sync_to_async(services.turn_start)(
                        agent=compact_agent, key="thousand", text=text, source="http"
                    )
                ).turn_id
                await executor.drive(turn_id)
        finally:
            await executor.sink.close()
            direct.close_all()
        return turn_id

    last = async_to_sync(thousand)()
    session = m.Session.objects.get(key="thousand")
    statuses = list(m.Turn.objects.filter(session=session).values_list("status", flat=True))
    assert statuses.count("completed") == 1000, {s: statuses.count(s) for s in set(statuses)}
    types = list(m.Event.objects.filter(session=session).values_list("type", flat=True))
    assert types.count("turn.failed") == 0 and types.count("compaction.failed") == 0
    assert types.count("compaction.completed") >= 50
    biggest = max(
        (row.get("usage") or {}).get("input_tokens", 0)
        for row in m.Message.objects.filter(session=session, role="assistant").values_list("data", flat=True)
    )
    assert biggest <= 1000
    assert m.Message.objects.filter(session=session, role="user").count() == 1000
    state = async_to_sync(wiring.store().load)(last)
    assert state.base == session.boundary and len(state.transcript) < 40


@pytest.mark.slow
def test_a_daily_schedule_over_365_days_stays_within_the_window():
    """The ops agent's daily-summary declaration, 365 ticks through the schedule's channel and
    ``receive`` (what ``sessions_app.proactive.schedules.fire`` runs for a tick, minus its once-per-tick
    bookkeeping, tested in test_schedules.py), in one event loop, on the demo model."""
    from agents_app.runtime.proactive import receive
    from agents_app.runtime.session import LocalDispatcher
    from sessions_app.proactive.channels import ScheduleChannel
    from sessions_app.proactive.schedules import declaration, tick_for

    seen: list[int] = []

    class Measured(DemoModel):
        async def stream(self, request):  # type: ignore[override]
            seen.append(view_tokens(request.system, request.messages))
            async for chunk in super().stream(request):
                yield chunk

    providers.register("demo", lambda agent: Measured(delay=0, essay_delay=0))
    wiring.agents.cache_clear()
    decl = declaration("ops", "daily-summary")
    first = dt.datetime(2027, 1, 1, 8, 0, 1, tzinfo=dt.UTC)

    async def year() -> None:
        rt = wiring.runtime(dispatcher=LocalDispatcher())
        rt.poll_interval = 0.01
        for n in range(365):
            tick = tick_for(decl.cron, decl.tz(), None, first + dt.timedelta(days=n))
            result = await receive(
                ScheduleChannel(),
                seed=decl.seed,
                target={"agent": "ops", "session": decl.session_key(tick)},
                trigger={"kind": "proactive", "by": f"cron:{decl.name}"},
                session=rt.session("ops", decl.session_key(tick)),
                timeout=30,
            )
            assert str(result.status) == "completed", (n, result.error)
        await rt.fanout.close()

    try:
        async_to_sync(year)()
    finally:
        providers.unregister("demo")
    session = m.Session.objects.get(agent="ops", key="ops-inbox")
    turns = list(m.Turn.objects.filter(session=session).values_list("status", flat=True))
    assert turns.count("completed") == 365
    types = list(m.Event.objects.filter(session=session).values_list("type", flat=True))
    assert types.count("compaction.completed") >= 3 and types.count("turn.failed") == 0
    assert max(seen) <= CONTEXT_WINDOW
    assert m.Message.objects.filter(session=session, role="trigger").count() == 365
    assert session.boundary > 0
