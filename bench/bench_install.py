"""What installing June costs a project: packages, megabytes and seconds, for the base install
and for each set of extras, each into a fresh virtual environment from the wheel built from
this checkout.

    .venv/bin/python bench/bench_install.py               # base and [all]
    .venv/bin/python bench/bench_install.py "" otel mcp   # the extras named ("" is the base)

pip's cache is left as it is (a developer's machine has one too): the seconds are resolving,
downloading what the cache lacks, unpacking and compiling. Print the load average beside them."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def measure(wheel: Path, extras: str, work: Path) -> dict:
    venv = work / f"venv-{extras or 'base'}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    empty = size_mb(venv)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", target],
        check=True,
    )
    seconds = time.monotonic() - started
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "list", "--format=freeze"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    packages = [line.split("==")[0] for line in listed if line.split("==")[0] not in ("pip", "june-django")]
    return {"extras": extras or "base", "packages": len(packages), "mb": size_mb(venv) - empty, "seconds": seconds}


def main(argv: list[str]) -> None:
    wanted = argv or ["", "all"]
    with tempfile.TemporaryDirectory(prefix="june-bench-install-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(ROOT)], check=True
        )
        wheel = next((work / "dist").glob("june_django-*.whl"))
        print(f"{wheel.name}; load average {Path('/proc/loadavg').read_text().split()[:3]}")
        for extras in wanted:
            row = measure(wheel, extras, work)
            print(f"  {row['extras']:>6}: {row['packages']:3d} packages, {row['mb']:6.1f} MB, {row['seconds']:5.1f} s")
        print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main(sys.argv[1:])
