"""The chat scripts' unit tests (``tests/js/*.test.mjs``, node:test) run in the fast tier: Node 20
runs them with no package installed (they test the chat's pure modules, which touch no DOM)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

JS_TESTS = Path(__file__).resolve().parents[1] / "js"


def test_the_chat_scripts_node_tests_pass() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the chat scripts' unit tests need Node 20 (node --test)")
    files = sorted(str(p) for p in JS_TESTS.glob("*.test.mjs"))
    assert files, "no tests/js/*.test.mjs"
    done = subprocess.run([node, "--test", *files], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout
