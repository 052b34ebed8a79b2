"""The chat's front-end tooling (frontend/): the vendored Markdown libraries are what
frontend/vendor.mjs makes of the locked npm packages, and markdown-it in the browser renders the
corpus exactly as markdown-it-py does on the server (the sanitizers are compared in Chromium:
tests/browser/test_markdown.py). Node and frontend/node_modules are installed by ``dev.py test``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sessions_app import markdown
from tests.markdown_corpus import CORPUS

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "sessions_app" / "static" / "june" / "vendor"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the chat's front-end checks need Node 20")
    if not (ROOT / "frontend" / "node_modules" / "esbuild").exists():
        pytest.fail("frontend/node_modules is missing: `python3 dev.py test` installs it (npm ci)")
    return node


def test_the_vendored_libraries_are_the_locked_packages_bundled(tmp_path: Path) -> None:
    done = subprocess.run(
        [_node(), str(ROOT / "frontend" / "vendor.mjs"), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lock = json.loads((ROOT / "frontend" / "package-lock.json").read_text())["packages"]
    for name, file in (("markdown-it", "markdown-it.js"), ("dompurify", "purify.js")):
        built = (tmp_path / file).read_text()
        assert built.startswith(f"// {name} {lock[f'node_modules/{name}']['version']} from npm"), built[:100]
        assert (VENDOR / file).read_text() == built, f"{file} differs from `node frontend/vendor.mjs`: run it"
    assert sorted(p.name for p in VENDOR.iterdir()) == ["markdown-it.js", "purify.js"]


def test_markdown_it_renders_the_corpus_as_markdown_it_py_does(tmp_path: Path) -> None:
    script = tmp_path / "render.mjs"
    module = (ROOT / "sessions_app" / "static" / "june" / "chat" / "markdown.js").as_uri()
    script.write_text(
        f'import {{ markdownHtml }} from "{module}";\n'
        'import { readFileSync } from "node:fs";\n'
        "const corpus = JSON.parse(readFileSync(0, 'utf8'));\n"
        "process.stdout.write(JSON.stringify(Object.fromEntries(Object.entries(corpus).map(([k, v]) => [k, markdownHtml(v)]))));\n"
    )
    done = subprocess.run([_node(), str(script)], input=json.dumps(CORPUS), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    browser = json.loads(done.stdout)
    server = {name: markdown.markdown_html(text) for name, text in CORPUS.items()}
    assert browser == server
