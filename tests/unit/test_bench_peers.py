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
    assert cpu == "| CPU per turn, processes + PostgreSQL (ms) | 20.0 | 60.0 | 20.0 | 0.33x | 1.00x |"
    assert "| exactly once | yes | yes | NO |" in out
    assert "mean of 2 run(s)" in out


def test_the_readme_names_every_package_of_the_peers_venvs():
    readme = (ROOT / "bench" / "README.md").read_text()
    assert set(SYSTEMS) == {"june", "langgraph", "dbos"}
    for packages in PACKAGES.values():
        for package in packages:
            assert f"`{package}`" in readme, package
