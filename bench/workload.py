"""Short demo-like turns through real worker clusters, for the throughput and soak benches.

A short turn is the fault-test agent's ``"steps:1"`` (tests/fault/agents/faultagent): an instant
scripted model calls the no-op sync tool once, then answers — model -> tool -> model, creation
included, what a user's one-tool-call turn costs the site. Turns are queued as POST ?wait=false
queues them (``services.turn_start``: create, then the django-q2 task after the commit).

Every figure is read from the database's own timestamps (the event log), never from the
bench's polling, and every batch is checked: each turn completed, with exactly one
``turn.completed`` event.
"""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import start

#: the turn's opening text: one model -> tool -> model round trip
SHORT = "steps:1"

#: the cluster's settings as deployed (lease, sweep and poll at their defaults), quiet logs
CLUSTER_ENV = {"JUNE_LEASE_SECONDS": "10", "JUNE_SWEEP_SECONDS": "1", "JUNE_Q_POLL": "0.05", "LOG_LEVEL": "WARNING"}


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def queue_turns(prefix: str, n: int, sessions: int, first: int = 0) -> list[str]:
    """Queue ``n`` short turns (numbered from ``first``) spread round-robin over ``sessions``
    sessions (a session's turns form its chain: they run one at a time, in order)."""
    return [start(f"{prefix}-{i % sessions}", SHORT) for i in range(first, first + n)]


def wait_done(turn_ids: list[str], timeout: float = 900.0, *, each_poll=None) -> None:
    """Until every turn has settled (whatever its status: ``check`` says which are wrong).
    ``each_poll``: called at every look (a ``DatabaseCpu``'s ``sample``)."""
    from sessions_app.models import Turn

    ids = list(turn_ids)
    deadline = time.monotonic() + timeout
    while Turn.objects.filter(pk__in=ids, status__in=("queued", "running")).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: turns of {len(ids)} still unsettled after {timeout:.0f}s")
        if each_poll is not None:
            each_poll()
        time.sleep(0.1)  # the figures come from the event log, not this poll: keep it light


@dataclass
class Batch:
    """What a batch of settled turns measured (ms, seconds since the epoch)."""

    turns: int
    started: float  # the first turn.started
    completed: float  # the last turn.completed
    service_ms: list[float]  # turn.started -> turn.completed, per turn
    step_ms: list[float]  # between consecutive checkpoints of a turn (the first from turn.started)
    steps_per_turn: float
    attempts_over_one: int
    extra: dict[str, float] = field(default_factory=dict)

    def per_step_ms(self) -> list[float]:
        return [s / self.steps_per_turn for s in self.service_ms]


def check(turn_ids: list[str]) -> Batch:
    """Every turn completed exactly once (status completed, one turn.completed event), and its
    timings from the event log. Raises SystemExit when a turn is wrong."""
    from sessions_app.models import Event, Turn
    from sessions_app.store.eventlog import timed

    ids = list(turn_ids)
    statuses = dict(Turn.objects.filter(pk__in=ids).values_list("id", "status"))
    wrong = {i: statuses.get(i) for i in ids if statuses.get(i) != "completed"}
    stamps: dict[str, list[tuple[int, str, float]]] = defaultdict(list)
    for turn_id, seq, type_, at in (
        timed(Event.objects.filter(turn_id__in=ids)).values_list("turn_id", "seq", "type", "at").iterator(2000)
    ):
        stamps[turn_id].append((seq, type_, at.timestamp()))
    completed = {i: sum(1 for _, t, _ in stamps[i] if t == "turn.completed") for i in ids}
    twice = {i: c for i, c in completed.items() if c != 1}
    if wrong or twice:
        raise SystemExit(
            f"not completed exactly once: {len(wrong)} with a wrong status (e.g. "
            f"{list(wrong.items())[:3]}), {len(twice)} without exactly one turn.completed "
            f"(e.g. {list(twice.items())[:3]})"
        )
    service, steps, counts, first, last = [], [], [], float("inf"), 0.0
    for turn_id in ids:
        events = sorted(stamps[turn_id])
        t0 = next(at for _, t, at in events if t == "turn.started")
        t1 = next(at for _, t, at in events if t == "turn.completed")
        first, last = min(first, t0), max(last, t1)
        service.append((t1 - t0) * 1000)
        commits = sorted({at for _, _, at in events if t0 <= at <= t1})  # one timestamp per checkpoint
        steps.extend((b - a) * 1000 for a, b in zip(commits, commits[1:]))
        counts.append(len(commits) - 1)
    retried = Turn.objects.filter(pk__in=ids, attempts__gt=1).count()
    return Batch(len(ids), first, last, service, steps, max(statistics.mean(counts), 1), retried)


# -- worker processes ---------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (a cluster: its workers)."""
    from sessions_app.workers.shutdown import descendants as below

    return below(pid)


def worker_pids(cluster) -> list[int]:
    """The cluster's worker processes: those below it that hold (or held) a turn's lease."""
    import socket

    from sessions_app.models import Turn

    host = socket.gethostname()
    owners = set(
        Turn.objects.filter(lease_owner__startswith=f"{host}:")
        .values_list("lease_owner", flat=True)
        .order_by("-updated_at")[:2000]
    )
    held = {int(o.split(":", 1)[1]) for o in owners}
    return sorted(p for p in descendants(cluster.pid) if p in held)


def rss_kb(pid: int) -> int:
    """Resident set size of a live process, from /proc (psutil is not installed)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pids: list[int]) -> float:
    """CPU (user + system) of live processes and of the children they reaped: a cluster's
    processes with ``descendants(cluster.pid)``, workers recycled by django-q2 included."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def cluster_cpu(cluster) -> float:
    return cpu_seconds(descendants(cluster.pid) + [cluster.pid])


def sessions_opened() -> int:
    """Connections the database has accepted so far (pg_stat_database; 0 elsewhere)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


class DatabaseCpu:
    """CPU seconds (from /proc) of the PostgreSQL backends connected to this database, the
    bench's own excluded: the database's share of a turn on a local server (0 on SQLite, or when
    the server's processes are not visible from here). ``sample()`` as often as convenient:
    a backend that started since the start counts from its birth, one that ended (a recycled
    worker's) up to its last sample."""

    def __init__(self) -> None:
        self.start = {pid: cpu_seconds([pid]) for pid in self._backends()}
        self.last = dict(self.start)

    @staticmethod
    def _backends() -> list[int]:
        from django.db import connection

        if connection.vendor != "postgresql":
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return [row[0] for row in cursor.fetchall()]

    def sample(self) -> None:
        for pid in self._backends():
            cpu = cpu_seconds([pid])
            if cpu:
                self.last[pid] = max(cpu, self.last.get(pid, 0.0))

    def seconds(self) -> float:
        self.sample()
        return sum(cpu - self.start.get(pid, 0.0) for pid, cpu in self.last.items())


def pause(cluster) -> None:
    """Freeze the whole cluster (SIGSTOP to its group): turns queued meanwhile wait in the queue."""
    cluster.signal(signal.SIGSTOP)


def resume(cluster) -> float:
    """Thaw it; returns the time (epoch seconds) it was let go."""
    t = time.time()
    cluster.signal(signal.SIGCONT)
    return t


def warm(cluster_workers: int) -> None:
    """A few turns so every worker process has loaded the agents and opened its connections."""
    ids = queue_turns(f"warm-{time.monotonic_ns()}", 4 * cluster_workers, 4 * cluster_workers)
    wait_done(ids, timeout=180)
    check(ids)


def burst(cluster, workers: int, prefix: str, turns: int, sessions: int) -> tuple[Batch, float]:
    """``turns`` short turns over ``sessions`` sessions, all queued while the (warm) cluster is
    paused, then let go: returns the batch and its turns per second, from the moment the cluster
    was thawed to the last turn.completed (the bench's own queuing is outside the span). The
    batch's ``extra`` has the cluster's CPU per turn (ms, all its processes), the database's
    (``db_cpu_ms``: its backends', ``DatabaseCpu``) and the database connections opened
    per turn (by anyone: the bench's own poll keeps its one connection)."""
    warm(workers)
    pause(cluster)
    try:
        ids = queue_turns(prefix, turns, sessions)
        cpu, opened, db_cpu = cluster_cpu(cluster), sessions_opened(), DatabaseCpu()
    finally:
        let_go = resume(cluster)
    wait_done(ids, each_poll=db_cpu.sample)
    db_cpu = db_cpu.seconds()
    cpu, opened = cluster_cpu(cluster) - cpu, sessions_opened() - opened
    batch = check(ids)
    batch.extra.update(cpu_ms=cpu * 1000 / turns, connects=opened / turns, db_cpu_ms=db_cpu * 1000 / turns)
    return batch, turns / (batch.completed - let_go)
