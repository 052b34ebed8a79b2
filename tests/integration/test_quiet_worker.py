"""When an idle worker wakes: its watchdog when the earliest lease it read runs out (never later
than a lease from its look), or a housekeeping pass is due. And a stopped cluster's leases are
handed on by the stop itself, not by the next look of a sleeping watchdog."""

from __future__ import annotations

import os
import socket
import time

import pytest
from django.conf import settings

from sessions_app import models as m
from sessions_app import services
from sessions_app.workers import watchdog
from sessions_app.workers.sweeper import SWEPT, expired, horizon, look, sweep
from sessions_app.workers.taker import take

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
