"""mypy over the engine (pyproject.toml [tool.mypy]), which ``python3 dev.py test`` also runs
before the suite: an attempt's state and what a step may ask of the loop are declared once
(``runtime/loop_state.py``: ``Attempt``, ``TurnOwner``), so a step that reads state the attempt
does not hold, calls the loop with the wrong arguments, or reaches for a part of the loop the
owner's interface does not offer, fails it. These tests prove the check bites: a copy of the
engine with one such mistake fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agents_app.runtime

ROOT = Path(agents_app.runtime.__file__).resolve().parents[2]
MYPY = Path(sys.executable).parent / "mypy"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "agents_app").mkdir()
    (tmp_path / "agents_app" / "__init__.py").write_text("")
    shutil.copytree(
        ROOT / "agents_app" / "runtime",
        tmp_path / "agents_app" / "runtime",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _mypy(tree: Path) -> subprocess.CompletedProcess[str]:
    # the engine alone (the config's files add the Django store, which this copy leaves out)
    return subprocess.run(
        [str(MYPY), "--no-incremental", "agents_app/runtime"], cwd=tree, capture_output=True, text=True, timeout=300
    )


def _add_to_tool_steps(tree: Path, method: str) -> None:
    path = tree / "agents_app" / "runtime" / "loop_tools.py"
    text = path.read_text()
    marker = "class ToolSteps:\n"
    assert marker in text
    path.write_text(text.replace(marker, marker + method, 1))


def test_the_engine_type_checks(tree: Path):
    out = _mypy(tree)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    "method, complaint",
    [
        # state no one declares (a typo of ``transcript``)
        (
            "    def _oops(self) -> int:\n        return len(self.attempt.transcrpit)\n\n",
            '"Attempt" has no attribute "transcrpit"',
        ),
        # the loop's method called with an argument it does not take
        (
            '    async def _oops(self) -> None:\n        await self.owner.fail("x", stage="tool")\n\n',
            'Unexpected keyword argument "stage"',
        ),
        # a part of the loop its owner's interface does not offer (the loop's own driving)
        (
            "    async def _oops(self) -> None:\n        await self.owner._drive()\n\n",
            '"TurnOwner" has no attribute "_drive"',
        ),
    ],
)
def test_a_step_reading_undeclared_state_fails_the_check(tree: Path, method: str, complaint: str):
    _add_to_tool_steps(tree, method)
    out = _mypy(tree)
    assert out.returncode != 0
    assert complaint in out.stdout, out.stdout
