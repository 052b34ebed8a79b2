"""Stopping a worker cluster, however the signal is delivered (issue 17, item 7).

Pins the failure: django-q2's ``qcluster`` whose whole process group gets SIGTERM (systemd's
default ``KillMode=control-group``, supervisord's ``stopasgroup``) never exits — its sentinel dies
inside ``stop_event.wait()`` and the main process blocks forever in ``stop_event.set()`` — and a
graceful stop waits for the running turn to finish. ``manage.py june_worker`` must exit within a
few seconds for each delivery mode, leave no process behind, release the lease of the turn its
worker was running, and a fresh cluster must finish that turn.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from sessions_app.workers.shutdown import descendants

from .qcluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

#: seconds a stop may take (SIGTERM's grace before SIGKILL is 3 s; a stop takes ~0.2 s idle)
STOP_BOUND = 6.0

MODES = {
    "sigterm-main": (signal.SIGTERM, False),
    "sigterm-group": (signal.SIGTERM, True),
    "sigint-group": (signal.SIGINT, True),
}


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])


def _finished_elsewhere(clusters, turn_id: str, worker: int) -> None:
    """A fresh cluster finishes the turn the stopped or killed worker ran, in an attempt of its own."""
    from sessions_app.models import Turn

    taker = clusters.start()
    try:
        wait_for(
            lambda: Turn.objects.get(pk=turn_id).status == "completed",
            timeout=90,
            what="another cluster to finish the turn",
        )
        turn = Turn.objects.get(pk=turn_id)
        assert turn.attempts >= 2, "a second attempt finished the turn"
        assert not turn.lease_owner.endswith(f":{worker}")
    finally:
        taker.kill()


def _deliver(cluster, sig: int, group: bool) -> None:
    if group:
        os.killpg(cluster.pid, sig)
    else:
        os.kill(cluster.pid, sig)


def _stop_and_time(cluster, sig: int, group: bool) -> float:
    started = time.monotonic()
    _deliver(cluster, sig, group)
    cluster.proc.wait(timeout=STOP_BOUND + 30)  # a hang fails below with its duration, not here
    return time.monotonic() - started


@pytest.mark.parametrize("mode", list(MODES))
def test_idle_cluster_stops_promptly(clusters, mode):
    sig, group = MODES[mode]
    cluster = clusters.start()
    wait_for(lambda: "running." in cluster.output(), timeout=60, what="the cluster to start")
    below = descendants(cluster.pid)
    # the main process is the sentinel, the pusher and the monitor (threads); below it, the
    # workers alone (JUNE_Q_WORKERS=1 in these clusters), each its direct child
    assert len(below) == 1, f"one worker process under the main process, and nothing else: {below}"
    assert _parent(below[0]) == cluster.pid
    elapsed = _stop_and_time(cluster, sig, group)
    print(f"{mode}: idle cluster stopped in {elapsed:.2f}s")
    assert elapsed < STOP_BOUND, f"{mode}: the cluster took {elapsed:.1f}s to stop"
    assert cluster.proc.returncode == 0
    assert not [p for p in below if _alive(p)], "a process of the cluster outlived it"


@pytest.mark.parametrize("mode", list(MODES))
def test_running_turn_resumes_elsewhere(clusters, fault_agent, mode):
    from sessions_app import services
    from sessions_app.models import Turn

    sig, group = MODES[mode]
    cluster = clusters.start()
    clusters.arm("ping:before")
    turn_id = services.turn_start(agent=fault_agent, key=f"stop-{mode}", text="mugs", source="http").turn_id
    worker = clusters.reached("ping:before")  # the worker waits inside the async tool, lease held
    turn = Turn.objects.get(pk=turn_id)
    assert turn.status == "running" and turn.lease_owner.endswith(f":{worker}")
    assert turn.lease_expires_at > time.time()

    elapsed = _stop_and_time(cluster, sig, group)
    print(f"{mode}: cluster with a running turn stopped in {elapsed:.2f}s")
    assert elapsed < STOP_BOUND, f"{mode}: the cluster took {elapsed:.1f}s to stop (it waited for the turn?)"
    assert not _alive(worker), "the worker outlived its cluster"
    turn = Turn.objects.get(pk=turn_id)
    assert turn.status == "running", "the turn is neither failed nor finished by the stop"
    assert turn.lease_expires_at <= time.time(), (
        f"the dead worker's lease was released at the stop (held by {turn.lease_owner}, the stopped worker "
        f"was {worker}; attempts {turn.attempts})\n--- the cluster's log\n{cluster.output()[-3000:]}"
    )

    clusters.disarm("ping:before")
    _finished_elsewhere(clusters, turn_id, worker)
    assert clusters.count("ping", turn_id) >= 1


@pytest.mark.xfail(
    strict=False,
    reason="characterises django-q2's race between its sentinel and the group's "
    "SIGTERM; under load the sentinel sometimes wins (seen once in a loaded run)",
)
def test_plain_qcluster_hangs_on_group_sigterm(clusters):
    """Characterises django-q2 1.11 (why june_worker exists): a SIGTERM to the whole group of
    plain ``qcluster`` leaves its main process running. If this starts failing, django-q2 fixed
    its cluster's stop; june_worker's prompt stop and lease release are still wanted."""
    import subprocess

    cluster = clusters.start(command="qcluster")
    wait_for(lambda: "running." in cluster.output(), timeout=60, what="the cluster to start")
    os.killpg(cluster.pid, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        cluster.proc.wait(timeout=STOP_BOUND)
    cluster.kill()


def test_a_worker_driving_100_turns_stops_within_3_s_and_they_resume_at_once(clusters, fault_agent):
    """Issue 36 item 6: SIGTERM to the group of a cluster whose one worker drives 100 turns (all
    paused inside their async tool): the cluster is gone within 3 s, every lease is released at
    the stop (none waits for its expiry), and a fresh cluster finishes all 100."""
    from sessions_app import services
    from sessions_app.models import Turn

    cluster = clusters.start()
    clusters.arm("ping:before")
    ids = [
        services.turn_start(agent=fault_agent, key=f"stop100-{n}", text="mugs", source="http").turn_id
        for n in range(100)
    ]
    wait_for(
        lambda: Turn.objects.filter(pk__in=ids, status="running", phase="tool_request_recorded").count() == 100,
        timeout=90,
        what="100 turns running in one worker",
    )
    assert len(set(Turn.objects.filter(pk__in=ids).values_list("lease_owner", flat=True))) == 1

    elapsed = _stop_and_time(cluster, signal.SIGTERM, True)
    print(f"\na cluster whose worker drove 100 turns stopped in {elapsed:.2f}s")
    assert elapsed < 3.0, f"the cluster took {elapsed:.1f}s to stop"
    now = time.time()
    assert Turn.objects.filter(pk__in=ids, status="running", lease_expires_at__gt=now).count() == 0, (
        "every lease released at the stop"
    )

    clusters.disarm("ping:before")
    began = time.monotonic()
    taker = clusters.start()
    try:
        wait_for(
            lambda: Turn.objects.filter(pk__in=ids, status="completed").count() == 100,
            timeout=120,
            what="a fresh cluster to finish the 100 turns",
        )
        print(f"the 100 turns completed {time.monotonic() - began:.1f}s after the fresh cluster's start")
        assert Turn.objects.filter(pk__in=ids, attempts__gte=2).count() == 100
    finally:
        taker.kill()


def test_a_sigkilled_main_process_takes_its_workers_with_it(clusters, fault_agent):
    """The main process is the workers' guard (the sentinel runs in it): SIGKILLed, it cannot
    stop them, so the kernel does (their parent-death signal). Its running turn's lease runs out
    and a fresh cluster finishes the turn: nothing lost, nothing run by an unguarded worker."""
    from sessions_app import services
    from sessions_app.models import Turn

    cluster = clusters.start()
    clusters.arm("ping:before")
    turn_id = services.turn_start(agent=fault_agent, key="stop-kill-main", text="mugs", source="http").turn_id
    worker = clusters.reached("ping:before")
    os.kill(cluster.pid, signal.SIGKILL)
    cluster.proc.wait(timeout=10)
    wait_for(lambda: not _alive(worker), timeout=STOP_BOUND, what="the worker to die with its main process")

    clusters.disarm("ping:before")
    _finished_elsewhere(clusters, turn_id, worker)
