"""Schedules on real django-q2 clusters: with TWO qcluster processes on the test database, a
forced-due every-minute schedule starts exactly one turn for its tick, a schedule missed for ten
minutes fires once (not once per missed minute), and one tick enqueued twice (what two
schedulers can do on SQLite, where select_for_update is a no-op) starts one turn.
Plus the pure tick arithmetic, by table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agents_app.cron import declarations, prev_tick, tick_for
from agents_app.runtime.errors import AgentConfigError
from sessions_app.outbox.queue import FIRE
from tests.fault.qcluster import Clusters, wait_for

UTC = UTC
AGENTS = Path(__file__).parent / "agents"


def at(s: str) -> datetime:
    return datetime.fromisoformat(s).replace(tzinfo=UTC)


# -- ticks (pure) --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cron, intended, now, expected",
    [
        # on time: the intended run is the tick (every cluster saw the same intended time)
        ("* * * * *", "2026-05-01 10:00:00", "2026-05-01 10:00:00.4", "2026-05-01 10:00:00"),
        # a forced, unaligned due time belongs to the tick before it
        ("* * * * *", "2026-05-01 10:00:41", "2026-05-01 10:01:05", "2026-05-01 10:00:00"),
        # the next tick passed long ago: a catch-up, collapsed into the latest tick
        ("* * * * *", "2026-05-01 09:50:00", "2026-05-01 10:00:20", "2026-05-01 10:00:00"),
        ("* * * * *", "2026-05-01 09:51:00", "2026-05-01 10:00:20", "2026-05-01 10:00:00"),
        ("0 9 * * *", "2026-04-28 09:00:00", "2026-05-01 12:00:00", "2026-05-01 09:00:00"),
        # no intended time (called by hand): the latest tick
        ("0 9 * * *", None, "2026-05-01 08:59:00", "2026-04-30 09:00:00"),
    ],
)
def test_tick_for(cron, intended, now, expected):
    got = tick_for(cron, ZoneInfo("UTC"), at(intended) if intended else None, at(now))
    assert got == at(expected)


def test_ticks_follow_the_declared_time_zone_across_dst():
    paris = ZoneInfo("Europe/Paris")
    assert prev_tick("0 9 * * *", paris, at("2026-03-28 12:00:00")) == at("2026-03-28 08:00:00")  # CET
    assert prev_tick("0 9 * * *", paris, at("2026-03-30 12:00:00")) == at("2026-03-30 07:00:00")  # CEST


@pytest.mark.parametrize(
    "decl, message",
    [
        ({"name": "x", "cron": "nope", "seed": "s"}, "invalid cron"),
        ({"name": "x", "cron": "* * * * *", "seed": "s", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"name": "X Y", "cron": "* * * * *", "seed": "s"}, "name must be"),
        ({"name": "x", "cron": "* * * * *", "seed": ""}, "seed"),
        ({"name": "x", "cron": "* * * * *", "seed": "s", "session": "d-{day}"}, "only {date}"),
        ({"name": "x", "cron": "* * * * *", "seed": "s", "every": 5}, "unknown keys"),
    ],
)
def test_bad_declarations_are_config_errors(decl, message):
    class A:
        name = "a"
        schedules = [decl]

    with pytest.raises(AgentConfigError, match=message):
        declarations(A())


# -- two real clusters ------------------------------------------------------------------------------


@pytest.fixture
def cron_agent(settings):
    from sessions_app import wiring

    settings.JUNE_AGENT_DIRS = [str(AGENTS)]
    wiring.agents.cache_clear()
    yield "cronagent"
    wiring.agents.cache_clear()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_clusters_fire_each_tick_exactly_once(cron_agent, tmp_path):
    from django.utils import timezone
    from django_q.models import Schedule, Task
    from django_q.tasks import async_task

    from agents_app.models import ScheduleRun
    from sessions_app import models as m
    from sessions_app.proactive.schedules import schedules_sync

    schedules_sync()
    name = {k: f"june:cronagent:{k}" for k in ("minutely", "missed", "racing")}
    started = timezone.now()
    forced = started - timedelta(seconds=1)
    Schedule.objects.filter(name=name["minutely"]).update(next_run=forced)
    Schedule.objects.filter(name=name["missed"]).update(next_run=started - timedelta(minutes=10))
    race_tick = "2026-01-01T00:00:00+00:00"
    for n in (1, 2):
        async_task(FIRE, "cronagent", "racing", intended=race_tick, task_name=f"race-{n}")

    clusters = Clusters(tmp_path, JUNE_AGENT_DIRS=str(AGENTS), JUNE_Q_WORKERS="2")
    try:
        first, second = clusters.start(), clusters.start()

        def runs(schedule: str) -> list[ScheduleRun]:
            return list(ScheduleRun.objects.filter(schedule=schedule).order_by("tick"))

        # django-q2's scheduler runs every 30 s in each cluster: generous deadlines
        wait_for(
            lambda: runs(name["minutely"]) and runs(name["missed"]),
            timeout=150,
            what=f"the scheduled firings\n{first.output()[-3000:]}",
        )
        # stop later minutes from firing while we count (a later tick would be a new, legal turn)
        Schedule.objects.filter(name__in=[name["minutely"], name["missed"]]).update(repeats=0)
        wait_for(
            lambda: Task.objects.filter(name__in=["race-1", "race-2"]).count() == 2,
            timeout=120,
            what="both racing firings",
        )

        def settled() -> bool:
            fired = ScheduleRun.objects.filter(schedule__startswith="june:cronagent:")
            done = m.Turn.objects.filter(pk__in=fired.values("turn_id"), status="completed").count()
            return done + fired.filter(status="failed").count() == fired.count()

        wait_for(settled, timeout=120, what="the turns to complete")
        failed = list(ScheduleRun.objects.filter(status="failed").values_list("schedule", "error"))
        assert not failed, (failed, first.output()[-3000:], second.output()[-3000:])
        assert first.alive() and second.alive()
    finally:
        clusters.stop_all()

    # the forced tick: one run, one turn, the trigger attributed to the schedule
    minutely = runs(name["minutely"])
    assert minutely[0].tick == prev_tick("* * * * *", ZoneInfo("UTC"), forced) or minutely[0].tick > forced
    inbox = m.Turn.objects.filter(session__agent="cronagent", session__key="cron-inbox")
    assert inbox.count() == len(minutely)
    assert set(inbox.values_list("pk", flat=True)) == {r.turn_id for r in minutely}
    turn = inbox.get(pk=minutely[0].turn_id)
    assert (turn.kind, turn.source, turn.input["by"]) == ("proactive", "schedule", "cron:minutely")
    assert turn.text.startswith("Daily summary")
    # ten missed minutes: one firing, for a recent tick (never one per missed interval)
    missed = runs(name["missed"])
    assert missed[0].tick >= started - timedelta(minutes=2), [r.tick for r in missed]
    assert m.Turn.objects.filter(session__key="cron-missed").count() == len(missed)
    # the same tick enqueued twice, taken by two clusters: one turn
    results = sorted(Task.objects.filter(name__in=["race-1", "race-2"]).values_list("result", flat=True))
    assert results == ["duplicate", "fired"], results
    [race] = runs(name["racing"])
    assert race.tick == datetime.fromisoformat(race_tick)
    assert m.Turn.objects.filter(session__key="cron-race").count() == 1
    assert m.Turn.objects.filter(session__key="cron-race", status="completed").count() == 1
