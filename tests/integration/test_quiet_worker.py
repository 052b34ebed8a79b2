"""When an idle worker wakes: its watchdog when the earliest lease it read runs out (never later
than a lease from its look), its taker after an unwoken empty look when the earliest take mark runs
out; the 1 s looks stay while anything happens. And a stopped cluster's leases and marks are
handed on by the stop itself, not by the next look of a sleeping watchdog or taker."""

from __future__ import annotations

import os
import socket
import time

import pytest
from django.conf import settings

from sessions_app import models as m
from sessions_app import services
from sessions_app.workers import taker as taker_mod
from sessions_app.workers import watchdog
from sessions_app.workers.sweeper import SWEPT, expired, horizon, look, sweep
from sessions_app.workers.taker import quiet_wait, take

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "faultagent"


def start(key: str) -> str:
    return services.turn_start(agent=AGENT, key=key, text="steps:1", source="http").turn_id


def running(turn_id: str, owner: str, expires: float) -> None:
    m.Turn.objects.filter(pk=turn_id).update(
        status="running", lease_owner=owner, lease_expires_at=expires, attempt_id="a1", attempts=1
    )


def test_the_next_sweep_is_due_when_the_earliest_lease_runs_out(fault_agent):
    now = time.time()
    assert sweep(now=now) == ({"redelivered": 0, "failed": 0}, now + horizon()), "none running: a lease from now"
    assert horizon() == min(settings.JUNE_LEASE_SECONDS, settings.JUNE_REQUEUE_AFTER, settings.JUNE_REDELIVER_AFTER)
    a, b = start("a"), start("b")
    running(a, "host:1", now + 3)
    running(b, "host:2", now + 2)
    assert look(now) == ([], now + 2)
    assert sweep(now=now)[1] == now + 2, "the earliest lease"
    assert sweep(now=now + 2.5)[0] == {"redelivered": 1, "failed": 0}, "b ran out: swept"
    assert sweep(now=now + 2.6)[1] == now + 3, "a runs out before b is looked at again"
    rows, upcoming = look(now + 3.5)
    assert rows == expired(now + 3.5) and [row[0] for row in rows] == [b, a] and upcoming is None
    counts, due = sweep(now=now + 3.5)
    assert counts == {"redelivered": 1, "failed": 0}
    assert due == min(now + 2.5 + settings.JUNE_REDELIVER_AFTER, now + 3.5 + horizon())
    assert m.Turn.objects.get(pk=a).lease_owner == SWEPT + "host:1"


def test_a_skipped_redelivery_is_due_again_after_its_window(fault_agent, settings):
    settings.JUNE_LEASE_SECONDS = settings.JUNE_REQUEUE_AFTER = 100.0
    settings.JUNE_REDELIVER_AFTER = 30.0
    now = time.time()
    turn_id = start("swept")
    running(turn_id, SWEPT + "host:1", now - 5)
    assert sweep(now=now) == ({"redelivered": 0, "failed": 0}, now - 5 + 30), "its window, not a lease"


def test_the_watchdog_sleeps_until_the_sweep_or_a_housekeeping_pass_is_due(monkeypatch, settings):
    settings.JUNE_NOTIFY_ENABLED = True
    settings.JUNE_NOTIFY_SECONDS = 15
    settings.JUNE_BATCH_POLL_SECONDS = 30
    monkeypatch.setattr(watchdog, "_notified_at", time.monotonic())
    monkeypatch.setattr(watchdog, "_unsent_swept_at", time.monotonic())
    monkeypatch.setattr(watchdog.batch_poller, "_polled_at", time.monotonic())
    assert 6.5 < watchdog.pause(1.0, time.time() + 7) <= 7, "the sweep's due"
    assert 14 < watchdog.pause(1.0, time.time() + 60) <= 15, "the notification pass"
    assert 0.8 <= watchdog.pause(1.0, time.time() - 5) <= 1.2, "never sooner than the period"
    settings.JUNE_NOTIFY_ENABLED = False
    assert 29 < watchdog.pause(1.0, time.time() + 60) <= 30, "the batch poller"


def test_a_quiet_taker_waits_until_the_earliest_take_mark_runs_out(fault_agent, settings):
    settings.JUNE_REQUEUE_AFTER = 10.0
    now = time.time()
    assert quiet_wait(1.0, now=now) == 10.0, "no mark: a mark made later runs out no sooner"
    turn_id = start("marked")
    assert take("host:1", 10, now=now, window=4) == [turn_id]
    assert quiet_wait(1.0, now=now) == pytest.approx(4.0)
    assert quiet_wait(1.0, now=now + 3.5) == 1.0, "never sooner than the fallback"
    assert quiet_wait(1.0, now=now + 5) == 10.0, "a mark that ran out is the table's, not a wait's"
    settings.JUNE_REQUEUE_AFTER = 60.0
    assert quiet_wait(1.0, now=now + 5) == 10.0, "a retry's hold is shorter"


class Runner:
    """A runner with room (or none, ``rooms`` False) for a scripted number of looks."""

    limit = 4

    def __init__(self, looks: int, rooms: list[bool]) -> None:
        self.looks, self.rooms = looks, rooms
        self.handed: list[str] = []

    def accepting(self) -> bool:
        self.looks -= 1
        return self.looks >= 0

    def reserve(self, most: int) -> int:
        return most if (self.rooms.pop(0) if self.rooms else True) else 0

    def unreserve(self, count: int) -> None:
        pass

    def hand(self, turn_id: str) -> None:
        self.handed.append(turn_id)

    def wait_for_room(self, timeout: float) -> None:
        waits.append(("room", timeout))


waits: list[tuple[str, float]] = []


class Waiter:
    """A waiter woken as scripted (True: a notification)."""

    script: list[bool] = []

    def wait(self, timeout: float) -> bool:
        waits.append(("wait", timeout))
        return self.script.pop(0) if self.script else False

    def close(self) -> None:
        pass


def test_the_taker_waits_long_only_after_an_unwoken_empty_look_with_room(monkeypatch):
    takes = [["t1"], [], [], [], [], [], []]
    monkeypatch.setattr(taker_mod, "take", lambda owner, most: takes.pop(0) if takes else [])
    monkeypatch.setattr(taker_mod, "quiet_wait", lambda fallback: 9.0)
    monkeypatch.setattr(taker_mod, "VersionWaiter", Waiter)
    monkeypatch.setattr(taker_mod, "NotifyWaiter", Waiter)
    monkeypatch.setattr(taker_mod.Taker, "_tune", lambda self: None)
    monkeypatch.setattr(taker_mod.settings, "JUNE_Q_LISTEN_POLL", 1.0)
    waits.clear()
    Waiter.script = [True, True, False, False, False]
    runner = Runner(looks=7, rooms=[True, True, True, True, True, False])
    taker = taker_mod.Taker(runner)
    taker._run()
    assert runner.handed == ["t1"]
    assert waits == [
        ("wait", 1.0),  # the first look took a turn
        ("wait", 1.0),  # woken, found nothing: maybe a row held by another's take
        ("wait", 1.0),  # woken again, found nothing
        ("wait", 9.0),  # unwoken, empty, with room: quiet
        ("wait", 9.0),
        ("room", 1.0),  # the runner declined: the 1 s look stays
        ("wait", 1.0),  # and after it, found nothing: not yet quiet
    ]


def test_a_stop_hands_on_its_dead_workers_running_turns_at_once(fault_agent):
    """No watchdog runs here: the stop sweeps the leases it expired itself."""
    from sessions_app.workers.shutdown import release_leases

    turn_id = start("held")
    pid = 2**22 + os.getpid()
    running(turn_id, f"{socket.gethostname()}:{pid}", time.time() + 60)
    assert take("host:1", 10) == []
    assert release_leases([pid]) == 1
    assert m.Turn.objects.get(pk=turn_id).lease_owner.startswith(SWEPT)
    assert take("host:1", 10) == [turn_id]


def test_the_guard_saves_the_clusters_status_each_second_and_at_a_replacement(monkeypatch):
    """q2's cache keeps a ``Stat`` for 3 s: saved each second a reader always finds one."""
    from types import SimpleNamespace

    from sessions_app.workers import sentinel as sentinel_mod

    saved: list[float] = []
    clock = [1000.0]
    monkeypatch.setattr(sentinel_mod, "Stat", lambda guard: SimpleNamespace(save=lambda: saved.append(clock[0])))
    monkeypatch.setattr(sentinel_mod, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    guard = sentinel_mod.CrashSafeSentinel.__new__(sentinel_mod.CrashSafeSentinel)
    alive = SimpleNamespace(is_alive=lambda: True)
    guard.pool, guard.monitor, guard.pusher = [], alive, alive
    guard._counter, guard._stat_at, guard.reincarnations = 0.0, None, 0
    for _ in range(9):
        guard.guard_once(0.5)
        clock[0] += 0.5
    assert saved == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0], "each second, not each cycle"
    assert max(b - a for a, b in zip(saved, saved[1:])) < 3

    def reincarnate(process: object) -> None:
        guard.reincarnations += 1
        guard.pusher = alive

    guard.reincarnate = reincarnate
    guard.pusher = SimpleNamespace(is_alive=lambda: False)
    clock[0] = 1004.2
    guard.guard_once(0.5)
    assert saved[-1] == 1004.2, "a replaced process is saved at once"
