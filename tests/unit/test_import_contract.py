"""The import contracts of pyproject.toml (import-linter), which `python3 dev.py test` also runs
before the suite: the runtime imports no Django and nothing of the project outside it,
agents_app never imports sessions_app, sessions_app's layers point one way, its entry points
are independent and never skip to the store (but for the named exceptions), and no package's modules import each other in a circle (function-level
imports included). These tests prove the contracts bite: a copy of the tree with one deliberate
back-import fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agents_app.runtime

ROOT = Path(agents_app.runtime.__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("agents_app", "sessions_app", "june_project", "june", "june_evals"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _add_import(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract(tree: Path):
    out = _lint(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "7 kept, 0 broken" in out.stdout


@pytest.mark.parametrize(
    "module, line, contract",
    [
        ("agents_app.runtime.loop", "import django.db  # noqa", "the runtime is pure Python"),
        ("agents_app.runtime.loop", "from sessions_app import models  # noqa", "the runtime is pure Python"),
        ("agents_app.loader", "from sessions_app import wiring  # noqa", "agents_app (what a turn IS)"),
        ("sessions_app.store.checkpoint", "from sessions_app import services  # noqa", "sessions_app layers"),
        ("sessions_app.workers.tasks", "from sessions_app.web import api  # noqa", "sessions_app layers"),
        # an entry point asks a service or a selector, never the store itself (a skip, not a back-arrow)
        ("sessions_app.admin.timeline", "from sessions_app.store import eventlog  # noqa", "never skip to the store"),
        ("sessions_app.web.views", "import sessions_app.store.host_ops  # noqa", "never skip to the store"),
        # a named exception is one module's, not its package's
        ("sessions_app.workers.tasks", "from sessions_app.store import pipes  # noqa", "never skip to the store"),
        ("sessions_app.services", "import june_evals.driver  # noqa", "sessions_app never imports june_evals"),
        ("june.settings", "import sessions_app.models  # noqa", "june.settings is read by a project's settings"),
        # the engine's old circle: the loop imports subagents, which named the loop for its annotations
        ("agents_app.runtime.subagents", "from agents_app.runtime import loop  # noqa", "no import circle"),
        # a function-level import counts too: wiring -> telemetry -> pricing -> wiring
        ("sessions_app.pricing", "def _later():\n    from sessions_app import wiring  # noqa", "no import circle"),
    ],
)
def test_a_back_import_breaks_its_contract(tree: Path, module: str, line: str, contract: str):
    _add_import(tree, module, line)
    out = _lint(tree)
    assert out.returncode != 0
    assert "0 broken" not in out.stdout
    broken = out.stdout.split("Broken contracts", 1)[1]
    assert contract in broken.replace("\n", " ")


def test_importing_the_runtime_loads_no_django():
    code = (
        "import sys, agents_app.runtime; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('django', 'channels', 'django_q', 'daphne', 'sessions_app', 'anthropic')"
        " or m.startswith(('agents_app.providers', 'agents_app.agents'))]; "
        "print(','.join(bad) or 'clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"
