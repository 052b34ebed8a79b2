#!/usr/bin/env python3
"""The two set-up commands of the README (stdlib only: runs on a fresh Python 3.11).

python3 dev.py run    install, migrate, create the demo data and login, and start daphne
                      and a django-q2 cluster on http://127.0.0.1:8000 (Ctrl-C stops both)
python3 dev.py test   install (with the test tools and Debian's Chromium), check the import
                      contracts (lint-imports), lint and format-check (ruff), type-check the
                      engine (mypy), lint the chat's scripts (Biome, from frontend/'s npm ci),
                      and run the tests not marked ``slow`` in one pytest, or with
                      JUNE_TEST_WORKERS=N in parallel, then the tests marked ``serial``
                      alone. ``--slow``: the slow tests instead (browser, fault, hostile
                      and single long tests); ``--all``: both. Other arguments go to pytest
                      (a test path named runs whatever it holds); DATABASE_URL / REDIS_URL
                      pick the backends. CI runs ``test`` and ``test --slow``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"


def sh(*cmd: str | Path, env: dict[str, str] | None = None, check: bool = True, cwd: Path = ROOT) -> int:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, check=check).returncode


def ensure_venv(extras: str) -> None:
    """Create .venv and install the project; re-install only when pyproject.toml changes."""
    if not PY.exists():
        print("· creating .venv", flush=True)
        sh(sys.executable, "-m", "venv", VENV)
        sh(PY, "-m", "pip", "install", "-q", "--upgrade", "pip")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = VENV / f".installed-{extras or 'base'}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    print(f"· installing dependencies ({extras or 'base'})", flush=True)
    target = f".[{extras}]" if extras else "."
    sh(PY, "-m", "pip", "install", "-q", "-e", target)
    stamp.write_text(digest)


def ensure_chromium() -> None:
    """Browser tests drive Debian's Chromium (test tools cannot download browsers here)."""
    if shutil.which("chromium") or Path("/usr/bin/chromium").exists():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        sys.exit("Chromium is missing: install Debian's `chromium` package (apt-get install chromium)")
    print("· installing Chromium (apt-get)", flush=True)
    sh("apt-get", "update", "-qq", check=False)
    sh("apt-get", "install", "-y", "-qq", "chromium")


JS = ROOT / "tests" / "js"
#: the chat's vendored libraries and its linter (frontend/package-lock.json): the fast tier needs them
FRONTEND = ROOT / "frontend"


def ensure_node_modules(folder: Path = JS) -> None:
    """``npm ci`` in ``folder`` when its modules are missing or its lockfile changed since they
    were installed: tests/js holds the npm clients the front-end protocols are tested with,
    frontend/ the chat's Markdown libraries (vendored from there) and its linter (Biome)."""
    lock = folder / "package-lock.json"
    stamp = folder / "node_modules" / ".june-installed"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    if not shutil.which("npm"):
        sys.exit(f"npm is missing: {folder.name}'s packages need Node.js 20+ and npm")
    print(f"· installing the npm packages (npm ci in {folder.relative_to(ROOT)})", flush=True)
    sh("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error", cwd=folder)
    stamp.write_text(digest)


def run() -> None:
    ensure_venv("site")  # this repository's site: every extra, and dj-database-url
    env = {**os.environ, "JUNE_EMBEDDED": "1", "DJANGO_SETTINGS_MODULE": "june_project.settings"}
    for key in ("DATABASE_URL", "REDIS_URL"):
        env.pop(key, None)  # the embedded default: SQLite, no external server
    env.setdefault("DEBUG", "1")
    env.setdefault("JUNE_DEMO_MCP", "1")  # the ops agent's demo MCP server (docs/tools.md)
    manage = [PY, "manage.py"]
    sh(*manage, "migrate", "-v0", env=env)
    sh(*manage, "collectstatic", "--noinput", "-v0", env=env)
    sh(*manage, "june_demo", env=env)
    host, port = env.get("JUNE_HOST", "127.0.0.1"), env.get("JUNE_PORT", "8000")

    def stop(signum, frame):  # Ctrl-C, or a SIGTERM from a process manager
        raise KeyboardInterrupt

    # explicit handlers: a shell that backgrounds us may start us with SIGINT ignored
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    procs = [
        subprocess.Popen(
            [str(PY), "-m", "daphne", "-b", host, "-p", port, "june_project.asgi:application"], cwd=ROOT, env=env
        ),
        subprocess.Popen([str(PY), "manage.py", "june_worker"], cwd=ROOT, env=env),
    ]
    print(f"\nJune is running on http://{host}:{port}/  (Ctrl-C stops it)\n", flush=True)
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip the clean-up
        for p in procs:
            if p.poll() is None:
                p.terminate()  # daphne and june_worker both stop within a second or two on SIGTERM
        deadline = time.time() + 10
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        print("June stopped.", flush=True)


def test(args: list[str]) -> None:
    ensure_venv("test")
    tier, args = _tier(args)
    if tier != "fast":
        ensure_chromium()  # the browser tests are slow ones
        ensure_node_modules()  # and so are the npm clients' (tests/js)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "june_project.settings", "DJANGO_ALLOW_ASYNC_UNSAFE": "true"}
    if tier != "slow":  # ``--slow`` runs after ``test`` (CI): the code was checked already
        ensure_node_modules(FRONTEND)
        _check(env)
    # one pytest by default: two parallel runs of the whole suite (CI, this stop) each failed once
    # on a timing-sensitive test under the load (test_runner, test_cancel_workers): parallel is opt-in
    workers = env.get("JUNE_TEST_WORKERS", "1")
    if workers in ("0", "1") or any(a == "-n" or a.startswith(("-n", "--numprocesses", "-m")) for a in args):
        sys.exit(_pytest([*_marked(tier), *args], env))  # one pytest, as asked
    # the tests in parallel (pytest-xdist: each worker has its own test database, channel prefix
    # and processes), then the few marked ``serial`` alone (the chaos test restarts PostgreSQL)
    parallel = _pytest(["-n", workers, *_marked(tier, "not serial"), *args], env)
    serial = _pytest([*_marked(tier, "serial"), *args], env)
    ok = (0, 5)  # 5: that part selected no test (a run of one file, say)
    if parallel in ok and serial in ok and (parallel, serial) != (5, 5):
        sys.exit(0)
    sys.exit(parallel if parallel not in ok else serial if serial not in ok else 5)


def _check(env: dict[str, str]) -> None:
    """The checks before the tests."""
    # the architecture's import contracts (pyproject.toml): a back-arrow or a cycle fails the run
    if sh(VENV / "bin" / "lint-imports", "--no-cache", env=env, check=False) != 0:
        sys.exit("lint-imports: an import contract is broken (see above; docs/architecture.md)")
    # the linter (pyproject.toml [tool.ruff]): pyflakes, pycodestyle, import order, bugbear, pyupgrade
    if sh(VENV / "bin" / "ruff", "check", "--no-cache", ".", env=env, check=False) != 0:
        sys.exit("ruff: lint findings (see above; `.venv/bin/ruff check --fix .` mends most)")
    # the house format (pyproject.toml [tool.ruff]): a file ruff would reformat fails the run
    if sh(VENV / "bin" / "ruff", "format", "--check", "--no-cache", "-q", ".", env=env, check=False) != 0:
        sys.exit("ruff format: files not in the house format (`.venv/bin/ruff format .` formats them)")
    # the engine's types (pyproject.toml [tool.mypy]): an attempt's state and what the loop's steps
    # may ask of the loop are declared once (runtime/loop_state.py)
    # (a cache of the run's own: CI checks two backends at once in one clone, and two mypys
    # writing one .mypy_cache crashed one of them with an INTERNAL ERROR)
    cache = ["--cache-dir", str(Path(env["JUNE_VAR_DIR"]) / "mypy-cache")] if env.get("JUNE_VAR_DIR") else []
    if sh(VENV / "bin" / "mypy", *cache, env=env, check=False) != 0:
        sys.exit("mypy: the engine's types do not check (see above)")
    # no block of ten lines or more written twice outside tests (the library's ``duplicates``
    # command, where this machine has it; DUPLICATES_ALLOWED names the pairs that may, and why)
    tool = shutil.which("duplicates")
    if tool is None:  # CI, a new machine: the same lines again (not the same shape with other names)
        found = [f"{a} ~ {b}: ten lines from line {line}" for (a, b), line in repeated_blocks().items()]
    else:
        report = subprocess.run(
            [tool, "--min-lines", "10", "--most", "200", "--seconds", "120"], cwd=ROOT, capture_output=True, text=True
        ).stdout
        found = duplicates_found(report)
    if found:
        print("\n".join(found), flush=True)
        sys.exit("duplicates: blocks of ten lines or more written twice (see above): one piece of code for both")
    # the chat's scripts (biome.json: Biome's recommended rules; a warning fails the run too)
    biome = FRONTEND / "node_modules" / ".bin" / "biome"
    if sh(biome, "lint", "--error-on-warnings", "--no-errors-on-unmatched", ".", env=env, check=False) != 0:
        sys.exit(
            "biome: lint findings in the chat's scripts (see above; `frontend/node_modules/.bin/biome lint --write .`)"
        )


#: pairs of files (in order) that share ten lines or more, and may: why
DUPLICATES_ALLOWED = {
    **dict.fromkeys(
        [
            ("agents_app/runtime/errors.py", "agents_app/runtime/errors.py"),
            ("agents_app/runtime/errors.py", "sessions_app/site_errors.py"),
        ],
        "one exception class per error, each with its own status and code",
    ),
    **dict.fromkeys(
        [
            ("agents_app/runtime/memory.py", "agents_app/runtime/seams.py"),
            ("agents_app/runtime/memory.py", "sessions_app/store/__init__.py"),
            ("agents_app/runtime/seams.py", "sessions_app/store/__init__.py"),
            ("agents_app/runtime/memory_rows.py", "sessions_app/store/rows.py"),
            ("agents_app/runtime/memory_rows.py", "agents_app/runtime/seams.py"),
            ("agents_app/runtime/seams.py", "sessions_app/store/rows.py"),
        ],
        "a seam's Protocol and the stores that implement it share its signatures (mypy holds them to it)",
    ),
    ("june/settings.py", "june/settings.py"): "one line per setting: its name, its typed reader and its default",
}
#: folders ``repeated_blocks`` leaves out: tests, migrations, what others wrote or a build made
NOT_OURS = {".git", ".venv", "node_modules", "var", "tests", "migrations", "vendor", "build", "dist"}
#: a line of a module's head or a bracket alone: ten of them in a row say nothing was copied
BOILERPLATE = re.compile(r"(from \S+ )?import \S|[\])}]+,?$|\"\"\"$|ROOT = |sys\.path\.")


def repeated_blocks(lines: int = 10, root: Path = ROOT) -> dict[tuple[str, str], int]:
    """Pairs of this tree's Python files (outside NOT_OURS) that hold the same ``lines`` lines,
    blank lines, comments and indentation aside, and are not in DUPLICATES_ALLOWED: the line
    where the block starts in the first file. Windows mostly of imports and brackets are not
    counted (``BOILERPLATE``)."""
    places: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(root.rglob("*.py")):
        if NOT_OURS & set(path.relative_to(root).parts):
            continue
        name = str(path.relative_to(root))
        text = [(n, t.strip()) for n, t in enumerate(path.read_text(errors="replace").splitlines(), 1)]
        kept = [(n, t) for n, t in text if t and not t.startswith("#")]
        for i in range(len(kept) - lines + 1):
            window = [t for _, t in kept[i : i + lines]]
            if sum(bool(BOILERPLATE.match(t)) for t in window) * 2 > lines:
                continue
            places.setdefault("\n".join(window), []).append((name, kept[i][0]))
    pairs: dict[tuple[str, str], int] = {}
    for where in places.values():
        for i, (a, line) in enumerate(where):
            for b, _ in where[i + 1 :]:
                pair = (min(a, b), max(a, b))
                if pair not in DUPLICATES_ALLOWED:
                    pairs.setdefault(pair, line)
    return pairs


DUPLICATE_ROW = re.compile(r"D\d+ (\S+?):\d+-\d+ ~ (\S+?):\d+-\d+(.*)")


def duplicates_found(report: str) -> list[str]:
    """The rows of a ``duplicates`` report that fail the check: a pair outside tests/ and
    migrations/, not boilerplate, not allowed by name."""
    found = []
    for line in report.splitlines():
        row = DUPLICATE_ROW.match(line)
        if row is None:
            found += [line] if line.startswith("incomplete:") else []
            continue
        a, b, rest = row.groups()
        if "boilerplate" in rest or any(p.startswith("tests/") or "/migrations/" in p for p in (a, b)):
            continue
        if (min(a, b), max(a, b)) not in DUPLICATES_ALLOWED:
            found.append(line)
    return found


#: which tests a tier runs (pytest's -m): ``fast`` is ``dev.py test``'s default, ``slow`` the
#: suites behind the marker (``--slow``), ``all`` both (``--all``, or test paths named)
TIERS = {"fast": "not slow", "slow": "slow", "all": ""}


def _tier(args: list[str]) -> tuple[str, list[str]]:
    """``--slow`` / ``--all`` pick the tier; named test paths run whatever they hold."""
    if "--slow" in args or "--all" in args:
        tier = "slow" if "--slow" in args else "all"
        return tier, [a for a in args if a not in ("--slow", "--all")]
    if any(a.startswith("-m") for a in args) or any(
        not a.startswith("-") and (ROOT / a.split("::")[0]).exists() for a in args
    ):
        return "all", args
    return "fast", args


def _marked(tier: str, extra: str = "") -> list[str]:
    expr = " and ".join(f"({e})" for e in (TIERS[tier], extra) if e)
    return ["-m", expr] if expr else []


def _pytest(args: list[str], env: dict[str, str]) -> int:
    pytest = subprocess.Popen([str(PY), "-m", "pytest", *args], cwd=ROOT, env=env)
    while True:
        try:
            return pytest.wait()
        except KeyboardInterrupt:  # pytest has the same Ctrl-C (or CI's SIGINT): let it report
            continue


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "test"):
        sys.exit(__doc__)
    if sys.argv[1] == "run":
        run()
    else:
        test(sys.argv[2:])


if __name__ == "__main__":
    main()
