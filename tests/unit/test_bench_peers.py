"""bench/bench_peers.py's table and setup, without running the systems (the bench does that):
the ratios are June's figure over each peer's, a run that was not exactly once says so, and
bench/README.md names every package the bench installs in the peers' venvs."""

from __future__ import annotations

from pathlib import Path

from bench import bench_peers
from bench.peers.systems import PACKAGES, SYSTEMS

ROOT = Path(__file__).resolve().parents[2]


def run(system: str, cpu: float, once: bool = True) -> dict:
    figures = {key: 1.0 for _, key, _ in bench_peers.ROWS}
    return {
        **figures,
        "system": system,
        "n": 10,
        "cpu_ms": cpu,
        "once": once,
        "load": "1 / 1 / 1 -> 1 / 1 / 1",
        "idle_pss_by_process": [(100, "daphne")],
    }


def test_the_table_shows_june_over_each_peer_and_who_ran_exactly_once(capsys):
    runs = [run("june", 30.0), run("langgraph", 60.0), run("dbos", 20.0, once=False), run("june", 10.0)]
    bench_peers.table(10, runs, ["june", "langgraph", "dbos"])
    out = capsys.readouterr().out
    cpu = next(line for line in out.splitlines() if line.startswith("| CPU per turn"))
    assert cpu == "| CPU per turn, processes + PostgreSQL + Redis (ms) | 20.0 | 60.0 | 20.0 | 0.33x | 1.00x |"
    assert "| exactly once | yes | yes | NO |" in out
    assert "mean of 2 run(s)" in out
    assert "  june: CPU per turn by run (ms): 30.0, 10.0" in out


def test_the_readme_names_every_package_of_the_peers_venvs():
    readme = (ROOT / "bench" / "README.md").read_text()
    assert set(SYSTEMS) == {"june", "langgraph", "dbos"}
    for packages in PACKAGES.values():
        for package in packages:
            assert f"`{package}`" in readme, package


class CountingPeer:
    """A peer whose finished count follows ``counts`` (its last one repeats), and how often it was asked."""

    def __init__(self, counts: list[int]) -> None:
        self.counts, self.asked = counts, 0

    def __call__(self, peer: object) -> int:
        self.asked += 1
        return self.counts[min(self.asked, len(self.counts)) - 1]


def test_the_wait_on_the_peer_ends_when_every_answer_is_finished(monkeypatch):
    monkeypatch.setattr(bench_peers.time, "sleep", lambda s: None)
    peer = CountingPeer([3, 5, 8, 10, 12])
    bench_peers.wait_peer(None, 10, timeout=60, count=peer)
    assert peer.asked == 4


def test_the_wait_on_the_peer_gives_up_when_its_count_stops_moving(monkeypatch):
    clock = iter(range(0, 10_000, 1))
    monkeypatch.setattr(bench_peers.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(bench_peers.time, "sleep", lambda s: None)
    peer = CountingPeer([3, 4, 4])  # a turn that failed asks the peer no more
    bench_peers.wait_peer(None, 10, timeout=600, count=peer)
    assert 3 < peer.asked < 20  # it gave up after ~10 s of no progress, well before the timeout


def test_the_peer_counts_a_second_answer_once_it_is_streamed_to_its_end():
    import httpx

    from bench.bench_concurrency import Peer

    peer = Peer(0.01)
    try:
        first = {"messages": [{"role": "user", "content": "order mugs [bench:k1]"}]}
        second = {
            "messages": [
                *first["messages"],
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "x", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
            ]
        }
        with httpx.Client(base_url=peer.url, timeout=10) as client:
            assert client.post("/v1/messages", json=first).status_code == 200
            counts = client.get("/_counts").json()
            assert (counts["finished"], counts["calls"]) == (0, {"k1": [1, 0]})
            assert b"message_stop" in client.post("/v1/messages", json=second).content
            counts = client.get("/_counts").json()
            assert (counts["finished"], counts["calls"]) == (1, {"k1": [1, 1]})
    finally:
        peer.server.shutdown()


def test_settling_waits_for_the_load_to_fall_below_the_mark(monkeypatch):
    loads = iter([3.0, 2.0, 1.6, 1.4, 9.9])
    slept = []
    monkeypatch.setattr(bench_peers.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    monkeypatch.setattr(bench_peers.time, "sleep", slept.append)
    bench_peers.settle(1.5)
    assert slept == [1, 1, 1]


def test_a_backend_opened_during_the_burst_counts_whole_and_the_redis_server_from_the_start(monkeypatch):
    """A backend the burst opens spent its start and first plans before a sample could see it:
    all of its CPU is the system's, where a backend there before the burst counts from then."""
    backends = [(1,)]
    used = {1: 5.0, 2: 0.25, 3: 7.0}

    class System:
        databases = ("june",)

        def pgids(self) -> list[int]:
            return []

    monkeypatch.setattr(bench_peers, "query", lambda db, sql, params=(): list(backends))
    monkeypatch.setattr(bench_peers, "cpu", lambda pids: sum(used[p] for p in pids))
    monkeypatch.setattr(bench_peers, "group_pids", lambda *pgids: {})
    monkeypatch.setattr(bench_peers, "redis_pid", lambda url: 3)
    meter = bench_peers.Meter(System(), redis="redis://here")
    meter.start()
    used[1] = 5.5
    backends.append((2,))  # opened since the meter began, 0.25 s of CPU already spent
    used[3] = 7.5
    meter.finish()
    assert meter.pg_cpu() == 0.5 + 0.25
    assert meter.redis_cpu() == 0.5
    assert bench_peers.Meter(System()).redis_cpu() == 0.0  # a system without Redis


def test_june_runs_the_sites_defaults_not_the_fault_suites():
    """The bench starts June's cluster through the fault suites' ``Clusters``, whose own
    settings (a 2 s lease, a 0.3 s sweep) made an idle worker sweep three times a second."""
    from june.settings import june_settings

    defaults = june_settings({})
    cluster = SYSTEMS["june"].CLUSTER
    for name in ("JUNE_LEASE_SECONDS", "JUNE_SWEEP_SECONDS"):
        assert float(cluster[name]) == defaults[name], name
    assert cluster["JUNE_TURNS_PER_WORKER"] == "600"  # bench/README says so
