"""A worker's liveness (issue 39, item 3): each worker process of a real ``june_worker`` cluster
writes its heartbeat row from its runner's loop, before its first turn; a SIGTERM stop deletes it,
a SIGKILL leaves it to go stale, shown as gone."""

from __future__ import annotations

import json
import signal

import pytest
from django.test import Client

from sessions_app import health
from sessions_app import models as m
from sessions_app.workers.beat import worker_id
from sessions_app.workers.shutdown import descendants

from .qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

BEAT = "0.3"


def _beats() -> dict[str, m.WorkerBeat]:
    return {b.id: b for b in m.WorkerBeat.objects.all()}


def test_a_worker_beats_while_it_runs_and_its_row_goes_with_a_clean_stop(clusters, settings):
    """Pins the missing liveness: nothing showed whether any worker process was alive."""
    settings.JUNE_WORKER_BEAT_SECONDS = float(BEAT)
    cluster = clusters.start(JUNE_WORKER_BEAT_SECONDS=BEAT, JUNE_Q_WORKERS="2")
    beats = wait_for(lambda: len(_beats()) == 2 and _beats(), timeout=60, what="two workers' heartbeats")
    workers = {worker_id(pid) for pid in descendants(cluster.pid)}
    assert set(beats) <= workers, "each row is a process of the cluster (host:pid)"
    assert {(b.running, b.slots) for b in beats.values()} == {(0, 200)}
    first = max(b.seen_at for b in beats.values())
    wait_for(lambda: min(b.seen_at for b in _beats().values()) > first, timeout=10, what="the next beats")
    answer = json.loads(Client().get("/readyz").content)
    assert answer["workers"] == 2 and answer["status"] == "ok"

    cluster.signal(signal.SIGTERM)
    cluster.proc.wait(timeout=30)
    assert not _beats(), "a clean stop deletes its workers' rows"
    assert json.loads(Client().get("/readyz").content)["workers"] == 0


def test_a_killed_worker_s_row_stays_and_is_marked_gone(clusters, settings):
    settings.JUNE_WORKER_BEAT_SECONDS = float(BEAT)
    cluster = clusters.start(JUNE_WORKER_BEAT_SECONDS=BEAT)
    wait_for(lambda: len(_beats()) == 1, timeout=60, what="the worker's heartbeat")
    cluster.kill()
    assert len(_beats()) == 1
    wait_for(lambda: health.worker_rows()[0]["stale"], timeout=10, what="the row to go stale")
    assert health.workers_alive() == 0
    response = Client().get("/readyz")
    assert response.status_code == 200, "no live worker is not unready (a web-only deployment)"
