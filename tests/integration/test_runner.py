"""The worker's runner (sessions_app/workers/runner.py): one event loop drives many turns at
once, a full runner takes no more, and one turn's slow tool does not hold the others' steps.
Run in this process, on this run's database (SQLite, or PostgreSQL through the store's pipes)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.common import start
from sessions_app import models as m
from sessions_app import wiring
from tests.fault.qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

AGENTS = Path(__file__).parent / "agents"


@pytest.fixture
def loadagent(settings):
    settings.JUNE_AGENT_DIRS = [str(AGENTS)]
    wiring.agents.cache_clear()
    yield "loadagent"
    wiring.agents.cache_clear()


@pytest.fixture
def make_runner(loadagent):
    from sessions_app.workers.runner import TurnRunner

    made: list[TurnRunner] = []

    def make(limit: int = 50, threads: int = 4, connections: int = 2) -> TurnRunner:
        runner = TurnRunner(limit=limit, threads=threads, connections_=connections)
        runner.start()
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.stop(60)


def turns(*texts: str) -> list[str]:
    return [start(f"run-{i}-{time.monotonic_ns()}", text, agent="loadagent") for i, text in enumerate(texts)]


def settled(turn_ids: list[str]) -> dict[str, str]:
    return dict(m.Turn.objects.filter(pk__in=turn_ids).values_list("id", "status"))


def test_one_runner_drives_many_waiting_turns_at_once(make_runner):
    """40 turns that each wait 1.5 s for a tool, handed to one runner: they wait together (about
    1.5 s in all), not one after another (60 s)."""
    runner = make_runner(limit=50)
    ids = turns(*["nap:1.5"] * 40)
    began = time.monotonic()
    with ThreadPoolExecutor(8) as pool:  # django-q2's workers hand turns over from their own threads
        answers = list(pool.map(runner.submit, ids))
    assert answers == ["handed"] * 40  # each on the runner's loop, which claims it
    wait_for(lambda: set(settled(ids).values()) == {"completed"}, timeout=30, what="40 turns to complete")
    assert time.monotonic() - began < 15  # one after another: 60 s
    assert runner.peak >= 30
    assert m.Turn.objects.filter(pk__in=ids, attempts=1).count() == 40


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_the_runners_loop_is_uvloops_unless_asyncio_is_asked_for(make_runner, settings, choice):
    """JUNE_EVENT_LOOP picks the runner's loop (uvloop by default: it is a dependency on every
    platform but Windows); turns run on either."""
    settings.JUNE_EVENT_LOOP = choice
    runner = make_runner()
    ids = turns("nap:0.2", "quick")
    assert [runner.submit(t, until_claimed=True) for t in ids] == ["running", "running"]
    wait_for(lambda: set(settled(ids).values()) == {"completed"}, timeout=30, what="2 turns to complete")
    assert type(runner._loop).__module__.split(".")[0] == choice


def test_a_full_runner_takes_no_more_until_a_turn_ends(make_runner):
    """Backpressure: with 2 slots, the third hand-over waits for a slot (the q2 worker blocks in
    its task, and its cluster fetches no more), then runs."""
    runner = make_runner(limit=2)
    ids = turns("nap:1.5", "nap:1.5", "quick")
    assert runner.submit(ids[0], until_claimed=True) == "running"
    assert runner.submit(ids[1], until_claimed=True) == "running"
    began = time.monotonic()
    assert runner.submit(ids[2], until_claimed=True) == "running"
    waited = time.monotonic() - began
    assert waited > 0.8, f"the third turn got a slot after {waited:.2f} s, before either nap ended"
    wait_for(lambda: set(settled(ids).values()) == {"completed"}, timeout=30, what="3 turns to complete")
    assert runner.peak == 2


def test_a_hand_over_waits_for_no_claim(make_runner, monkeypatch):
    """``run_turn``'s hand-over returns once the turn is on the runner's loop, not after its
    claim: a claim held back (a busy database, a late loop) does not hold django-q2's worker. A
    duplicate delivery is handed over too; its claim is refused, it frees its slot, and the turn
    runs once."""
    runner = make_runner(limit=3)
    [turn_id] = turns("quick")
    release = threading.Event()
    original = runner.executor.drive

    async def drive(turn_id, **kw):
        await asyncio.to_thread(release.wait)  # the claim waits until the test lets it go
        return await original(turn_id, **kw)

    monkeypatch.setattr(runner.executor, "drive", drive)
    answers: list[str | None] = []
    handing = threading.Thread(target=lambda: answers.extend(runner.submit(turn_id) for _ in range(2)))
    handing.start()
    handing.join(10)
    try:
        assert not handing.is_alive(), "the hand-over waited for the claim"
        assert answers == ["handed", "handed"]
        assert settled([turn_id]) == {turn_id: "queued"}  # nothing claimed yet
    finally:
        release.set()
    wait_for(lambda: settled([turn_id]) == {turn_id: "completed"}, timeout=30, what="the turn to complete")
    wait_for(lambda: not runner.running, timeout=10, what="both drives to end")
    assert m.Turn.objects.get(pk=turn_id).attempts == 1
    assert runner._slots.acquire(blocking=False) and runner._slots.acquire(blocking=False)  # slots free again


def test_a_turn_not_claimable_is_handed_back_at_once(make_runner):
    """A duplicate delivery of a turn the runner drives already: its claim is refused, the
    task ends (None), and the turn runs once."""
    runner = make_runner()
    [turn_id] = turns("nap:1")
    assert runner.submit(turn_id, until_claimed=True) == "running"
    assert runner.submit(turn_id, until_claimed=True) is None
    wait_for(lambda: settled([turn_id]) == {turn_id: "completed"}, timeout=30, what="the turn to complete")
    assert m.Turn.objects.get(pk=turn_id).attempts == 1


@pytest.mark.slow
def test_slow_tools_of_two_turns_do_not_hold_a_third_turns_steps(make_runner):
    """A sync tool that holds its thread for 4 s and an async tool that sleeps 4 s, in two turns
    of the runner: short turns started meanwhile run their steps at once (each well inside a
    second), while both tools still run. On PostgreSQL the sync tool has used its connection
    first (its step's transaction is open meanwhile); on SQLite that would hold the database's
    one write lock for the tool's run (docs/workers.md), so there it sleeps without a query."""
    from tests.conftest import is_postgres

    runner = make_runner(threads=2)
    slow = turns("blockdb:4" if is_postgres() else "block:4", "nap:4")
    for turn_id in slow:
        assert runner.submit(turn_id, until_claimed=True) == "running"
    wait_for(
        lambda: all(m.Event.objects.filter(turn_id=t, type="action.requested").exists() for t in slow),
        timeout=10,
        what="both slow turns to reach their tools",
    )
    quick = turns(*["quick"] * 5)
    began = time.monotonic()
    for turn_id in quick:
        assert runner.submit(turn_id, until_claimed=True) == "running"
    wait_for(lambda: set(settled(quick).values()) == {"completed"}, timeout=10, what="the quick turns")
    took = time.monotonic() - began
    assert set(settled(slow).values()) == {"running"}, "the quick turns waited for a slow tool"
    assert took < 2.0, f"5 quick turns took {took:.2f} s beside two slow tools"
    wait_for(lambda: set(settled(slow).values()) == {"completed"}, timeout=30, what="the slow turns")


def test_a_drive_that_fails_frees_its_slot(make_runner, monkeypatch):
    """An error out of a turn's drive (its database connection failing, say) is logged; the
    slot is free again and the runner goes on with other turns."""
    runner = make_runner(limit=1)
    failing, fine = turns("quick", "quick")

    original = runner.executor.drive
    calls = {"n": 0}

    async def drive(turn_id, **kw):
        calls["n"] += 1
        if turn_id == failing:
            raise RuntimeError("the connection failed")
        return await original(turn_id, **kw)

    monkeypatch.setattr(runner.executor, "drive", drive)
    assert runner.submit(failing, until_claimed=True) is None  # the drive ended before its claim: logged, not claimed
    assert runner.submit(fine, until_claimed=True) == "running"
    wait_for(lambda: settled([fine]) == {fine: "completed"}, timeout=30, what="the next turn")
    # the turn's row settles before its drive returns and frees the slot: wait for that too (the
    # bare assert failed under load, the slot freed a moment after the row said completed)
    wait_for(lambda: not runner.running, timeout=10, what="the slot freed")


def test_a_stopped_runner_ends_when_its_turns_have(make_runner):
    runner = make_runner()
    [turn_id] = turns("nap:1")
    runner.submit(turn_id)
    stopper = threading.Thread(target=runner.stop)
    stopper.start()
    stopper.join(30)
    assert not stopper.is_alive() and not runner._thread.is_alive()
    assert settled([turn_id]) == {turn_id: "completed"}


def test_the_runner_goes_on_after_the_server_ended_its_connections(make_runner):
    """Every connection the runner holds — its pipes' and its threads' — terminated between two
    turns (a PostgreSQL restart, a killed backend): the next turn still completes, and in its
    first attempt, on connections opened again."""
    from tests.conftest import is_postgres

    if not is_postgres():
        pytest.skip("terminating a server's connections: PostgreSQL")
    from django.db import connection

    runner = make_runner(threads=1, connections=1)
    first, second = turns("blockdb:0", "blockdb:0")
    runner.submit(first)
    wait_for(lambda: settled([first]) == {first: "completed"}, timeout=30, what="the first turn")
    with connection.cursor() as cur:
        cur.execute(
            "SELECT array_agg(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        [pids] = cur.fetchone()
        assert len(pids) >= 2  # the runner's pipe and its thread's connection
        cur.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])

    def gone() -> bool:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s::int[])", [pids])
            return cur.fetchone()[0] == 0

    wait_for(gone, timeout=10, what="the terminated backends to exit")
    assert runner.submit(second, until_claimed=True) == "running"
    wait_for(lambda: settled([second]) == {second: "completed"}, timeout=30, what="the second turn")


def test_a_turn_that_holds_the_loop_is_seen_and_the_others_go_on_after(make_runner, caplog):
    """An async tool that computes for 1 s without awaiting holds every turn of its process for
    that second (what the docs tell tool authors not to do): the runner's watch logs it, and
    the turns beside it complete."""
    runner = make_runner()
    ids = turns("burn:1", "quick", "quick")
    for turn_id in ids:
        assert runner.submit(turn_id, until_claimed=True) == "running"
    wait_for(lambda: set(settled(ids).values()) == {"completed"}, timeout=30, what="the turns")
    assert runner.lag_max >= 0.5
    assert "event loop was held" in caplog.text


def test_an_idle_runner_does_not_watch_its_loop_and_a_turn_starts_the_watch(make_runner, monkeypatch):
    """The watch of the loop ticks every ``LAG_TICK`` to measure its lateness; with no turn
    running there is nobody to be late for, and each tick of an idle worker was its CPU for
    nothing. It sleeps until a turn starts, then ticks while turns run."""
    from sessions_app.workers import runner as runner_module

    ticks: list[float] = []

    class Watched:
        """The runner module's ``asyncio``, counting the watch's sleeps."""

        def __getattr__(self, name: str):
            return getattr(asyncio, name)

        @staticmethod
        async def sleep(delay: float, *args):
            if delay == runner_module.LAG_TICK:
                ticks.append(delay)
            return await asyncio.sleep(delay, *args)

    monkeypatch.setattr(runner_module, "asyncio", Watched())
    runner = make_runner()
    time.sleep(1.0)  # ten ticks' time
    assert len(ticks) <= 1 and runner.lag == 0.0
    (turn,) = turns("burn:0.5")
    assert runner.submit(turn, until_claimed=True) == "running"
    wait_for(lambda: settled([turn]) == {turn: "completed"}, timeout=30, what="the turn")
    assert len(ticks) >= 2  # it watched the loop while the turn ran
    assert runner.lag_max >= 0.3  # and saw the tool hold it


def test_a_runner_beats_from_its_loop_and_its_row_goes_when_it_stops(make_runner, settings):
    """A worker's liveness (docs/operations.md "Health"): the runner's row, written every beat
    with its running turns and slots, deleted by its stop (a worker retired by ``recycle``)."""
    from sessions_app.workers.beat import worker_id

    settings.JUNE_WORKER_BEAT_SECONDS = 0.1
    runner = make_runner(limit=7)
    row = wait_for(lambda: m.WorkerBeat.objects.filter(pk=worker_id()).first(), timeout=10, what="the beat")
    assert (row.running, row.slots) == (0, 7)
    wait_for(lambda: m.WorkerBeat.objects.get(pk=worker_id()).seen_at > row.seen_at, timeout=10, what="the next beat")
    runner.stop(30)
    assert not m.WorkerBeat.objects.filter(pk=worker_id()).exists()


def test_a_runner_whose_loop_runs_late_takes_no_new_turn_until_it_catches_up(make_runner, settings, monkeypatch):
    """``JUNE_RUNNER_BUSY_LAG``: while the loop's smoothed lateness is over it (here after an
    async tool computed for 1 s without awaiting), a hand-over waits, holding its slot; it goes
    ahead once the loop has caught up, and the turn runs."""
    from sessions_app.workers import capacity
    from sessions_app.workers import runner as runner_module

    monkeypatch.setattr(capacity, "BUSY_FLOOR", 0)  # however few turns it drives
    monkeypatch.setattr(runner_module, "BUSY_WAIT", 60.0)  # only catching up lets it go
    settings.JUNE_RUNNER_BUSY_LAG = 0.05
    runner = make_runner()
    burning, quick = turns("burn:1", "quick")
    assert runner.submit(burning, until_claimed=True) == "running"
    wait_for(lambda: runner.lag > 0.1, timeout=10, what="the loop to run late")
    assert runner.submit(quick) == "handed"
    assert runner.lag <= 0.05
    wait_for(lambda: set(settled([burning, quick]).values()) == {"completed"}, timeout=30, what="the turns")


def test_a_taken_turn_starts_when_its_runner_can_run_it(loadagent, settings, monkeypatch):
    """A taker that took every turn its runner had a slot for started them all at once: each
    said ``turn.started`` and then waited on the loop behind all the others (a burst of short
    turns ran 3x longer from start to end than one at a time). Beyond ``BUSY_FLOOR`` turns a
    runner takes more only as its loop has room for them, so a turn's time from its start to
    its end is a fraction of the burst's: here 12 turns that each compute 0.3 s on the loop (a
    millisecond at a time), queued before the runner starts, with a slot for every one."""
    from sessions_app.workers import capacity
    from sessions_app.workers import runner as runner_module

    monkeypatch.setattr(capacity, "BUSY_FLOOR", 2)
    settings.JUNE_RUNNER_BUSY_LAG = 0.02
    ids = turns(*["spin:0.3"] * 12)
    runner = runner_module.TurnRunner(limit=50, threads=4, connections_=2, take=True)
    runner.start()
    try:
        wait_for(lambda: set(settled(ids).values()) == {"completed"}, timeout=60, what="12 turns to complete")
    finally:
        runner.stop(60)
    rows = list(m.Turn.objects.filter(pk__in=ids).values_list("started_at", "ended_at"))
    spans = sorted((ended - started).total_seconds() for started, ended in rows)
    whole = (max(ended for _, ended in rows) - min(started for started, _ in rows)).total_seconds()
    assert spans[6] < whole / 2, f"started to ended: median {spans[6]:.2f} s of the {whole:.2f} s they all took"
    assert runner.peak < 12, "all of them at once"
    assert m.Turn.objects.filter(pk__in=ids, attempts=1).count() == 12


def test_a_runner_takes_turns_that_wait_for_their_model_at_once(loadagent, settings, monkeypatch):
    """Turns that wait (a model's answer, an async tool's sleep) cost their loop almost
    nothing: beyond ``BUSY_FLOOR`` a runner still takes a burst of them at once, not one at a
    time (40 turns that each nap 1.5 s complete in a few seconds, all running together)."""
    from sessions_app.workers import capacity
    from sessions_app.workers import runner as runner_module

    monkeypatch.setattr(capacity, "BUSY_FLOOR", 2)
    settings.JUNE_RUNNER_BUSY_LAG = 0.02
    ids = turns(*["nap:1.5"] * 40)
    runner = runner_module.TurnRunner(limit=50, threads=4, connections_=2, take=True)
    began = time.monotonic()
    runner.start()
    try:
        wait_for(lambda: set(settled(ids).values()) == {"completed"}, timeout=60, what="40 turns to complete")
    finally:
        runner.stop(60)
    assert time.monotonic() - began < 15
    assert runner.peak >= 30


def test_a_runner_opens_its_connections_as_it_starts_and_starts_with_the_database_down(make_runner, monkeypatch):
    """Its pipes open when its loop starts, before any turn; a database down then fails no
    start (the runner starts, its pipes closed), and a turn handed to it later opens them."""
    from tests.conftest import is_postgres

    if not is_postgres():
        pytest.skip("the runner's own connections (pipes): PostgreSQL")
    from sessions_app.store import pipes

    up = make_runner(connections=2)
    wait_for(lambda: up._pipes.in_use() == 2, timeout=10, what="the runner's pipes to open")
    real = pipes.connection_params
    down = [True]
    monkeypatch.setattr(pipes, "connection_params", lambda: {**real(), "port": 1} if down[0] else real())
    runner = make_runner(connections=2)
    time.sleep(0.5)
    assert runner._thread.is_alive() and runner._pipes.in_use() == 0
    down[0] = False
    [turn_id] = turns("blockdb:0")
    runner.submit(turn_id)
    wait_for(lambda: settled([turn_id]) == {turn_id: "completed"}, timeout=30, what="the turn")
    assert runner._pipes.in_use() >= 1
