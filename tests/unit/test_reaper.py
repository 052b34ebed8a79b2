"""A test run is on its own: a killed run's workers do not outlive it into the next run
(tests/reaper.py), and its Redis keys are its own (root conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests import reaper


def _sleeper(run: int) -> subprocess.Popen:
    env = {**os.environ, reaper.MARK: str(run)}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)


def _gone_pid() -> int:
    """The id of a process that has ended (a run that was killed)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_gone_runs_process_is_an_orphan_and_is_reaped_while_a_live_runs_is_kept():
    dead_run = _gone_pid()
    orphan, kept = _sleeper(dead_run), _sleeper(os.getppid())  # our parent: a run that is alive
    try:
        deadline = time.monotonic() + 10
        while not {orphan.pid, kept.pid} <= set(reaper._marks()) and time.monotonic() < deadline:
            time.sleep(0.02)  # until both have exec'd with their environments
        found = reaper.orphans()
        assert orphan.pid in found
        assert kept.pid not in found and os.getpid() not in found
        reaper.reap(found)
        assert orphan.wait(timeout=10) == -9
        assert kept.poll() is None
    finally:
        for proc in (orphan, kept):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_run_finds_its_own_processes_but_not_itself():
    own = _sleeper(os.getpid())
    try:
        deadline = time.monotonic() + 10
        while own.pid not in reaper.of_run(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert own.pid in reaper.of_run(os.getpid())
        assert os.getpid() not in reaper.of_run(os.getpid())
    finally:
        own.kill()
        own.wait()


def test_a_runs_redis_layer_and_the_processes_it_starts_share_the_runs_own_prefix():
    """The other half of a run's isolation (root conftest): its Redis keys are its own, and the
    workers it starts (which read the environment) use the same."""
    from django.conf import settings

    prefix = os.environ["JUNE_CHANNEL_PREFIX"]
    assert prefix.startswith("june-test-")
    for layer in settings.CHANNEL_LAYERS.values():
        if layer["BACKEND"].startswith("channels_redis"):
            assert layer["CONFIG"]["prefix"] == prefix
