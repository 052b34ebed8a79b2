"""Start, kill, pause and resume real worker clusters on the test database: ``manage.py
june_worker`` (the production command: django-q2's cluster with a prompt stop) unless a test
asks for plain ``qcluster``.

Each cluster runs in its own process group (``start_new_session``) so the whole cluster —
its main process and its workers — dies with one ``os.killpg``. The child's settings point at
pytest-django's test database through DATABASE_URL (tests must use
``django_db(transaction=True)`` so their rows are committed and visible to the children).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tests.processes import database_url, free_port  # noqa: F401 (the fault tests import them from here)

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / "tests" / "fault" / "agents"
#: the Batches agent, apart: its model is Anthropic's, so a cluster that loads it imports the
#: anthropic SDK before it starts (providers.warm), which only test_batches_kill's clusters need
BATCH_AGENTS = ROOT / "tests" / "fault" / "batch_agents"


def wait_for(cond: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``cond`` until it returns something truthy (never a bare sleep-to-wait)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Cluster:
    """One worker cluster (``manage.py june_worker`` or ``qcluster``) in its own process group."""

    def __init__(self, env: dict[str, str], log_path: Path, command: str = "june_worker") -> None:
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", command],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the whole cluster: no cleanup of any kind runs."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")


class Clusters:
    """Every cluster a test module starts, with the environment they share."""

    def __init__(self, workdir: Path, **overrides: str) -> None:
        self.workdir = workdir
        self.fault_dir = workdir / "fault"
        self.fault_dir.mkdir(parents=True, exist_ok=True)
        self.overrides = overrides
        self.started: list[Cluster] = []

    def env(self, **extra: str) -> dict[str, str]:
        from django.conf import settings

        env = dict(os.environ)
        for key in [k for k in env if k.startswith("PYTEST") or k == "DJANGO_ALLOW_ASYNC_UNSAFE"]:
            env.pop(key)
        env.update(
            {
                "DATABASE_URL": database_url(),
                "JUNE_AGENT_DIRS": str(AGENTS),
                "JUNE_FAULT_DIR": str(self.fault_dir),
                "JUNE_LEASE_SECONDS": "2",
                "JUNE_SWEEP_SECONDS": "0.3",
                "JUNE_Q_WORKERS": "1",
                "JUNE_Q_POLL": "0.02",
                "PYTHONUNBUFFERED": "1",
                "LOG_LEVEL": "INFO",
                # turns come faster than a person's: the fault suites are not about rate limits
                "JUNE_RATE_LIMITS": "0",
                # django-q2 signs queued tasks with SECRET_KEY: the children must use the test's
                "SECRET_KEY": settings.SECRET_KEY,
            }
        )
        env.update(self.overrides)
        env.update(extra)
        return env

    def start(self, command: str = "june_worker", **extra: str) -> Cluster:
        n = len(self.started)
        cluster = Cluster(self.env(**extra), self.workdir / f"qcluster-{n}.log", command)
        self.started.append(cluster)
        return cluster

    def stop_all(self) -> None:
        for cluster in self.started:
            if cluster.alive():
                cluster.kill()  # nothing to save: the tests are over

    # -- pause points ---------------------------------------------------------------------------

    def arm(self, name: str) -> None:
        (self.fault_dir / f"at-{name}").unlink(missing_ok=True)
        (self.fault_dir / f"arm-{name}").write_text("1")

    def disarm(self, name: str) -> None:
        (self.fault_dir / f"arm-{name}").unlink(missing_ok=True)

    def reached(self, name: str, timeout: float = 60.0) -> int:
        at = self.fault_dir / f"at-{name}"
        wait_for(at.exists, timeout=timeout, what=f"pause point {name}")
        return int(wait_for(lambda: at.read_text().strip(), timeout=5, what="pid in marker"))

    def count(self, kind: str, turn_id: str) -> int:
        path = self.fault_dir / f"{kind}-{turn_id}"
        return len(path.read_text().splitlines()) if path.exists() else 0
