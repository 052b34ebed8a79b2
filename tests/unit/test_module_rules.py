"""The tree reads well to a newcomer: no two modules share a file name (a name says which module it
is, in a traceback, a search or an editor's tab), no module is longer than ``MAX_LINES``, and no
module imports another's private name (``_x``: what a module keeps to itself may change without
notice; a name another module needs is public). Figures — what something measured — live in
docs/ and in what bench/ prints, never in a comment or a docstring, where they go stale unseen.

Outside tests/ and migrations/ (numbered, Django's). Django's conventions keep their names:
``apps.py``, ``models.py``, ``admin.py``, ``urls.py``, ``settings.py``, ``asgi.py``, ``wsgi.py``
and ``__init__.py`` are what Django and a host project look for, so each package has its own.
So do the agent folders (``agents_app/agents/<name>/``): ``agent.py`` and ``tools/<tool>.py`` are
the layout an agent's author follows (docs/architecture.md "How to add …")."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
CONVENTIONS = {"__init__.py", "apps.py", "models.py", "admin.py", "urls.py", "settings.py", "asgi.py", "wsgi.py"}
AGENT_FOLDERS = "agents_app/agents/"
#: the modules still over MAX_LINES, each at most as long as it is now (it may only shrink): a
#: bench script not yet split
OVER = {
    "bench/bench_concurrency.py": 1243,
}
PACKAGES = ("agents_app", "sessions_app", "june", "june_evals", "june_project", "bench")


def _modules() -> list[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [p for p in tracked if not p.startswith("tests/") and "/migrations/" not in p and (ROOT / p).exists()]


def test_no_two_modules_share_a_file_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        name = path.rsplit("/", 1)[-1]
        if name in CONVENTIONS or path.startswith(AGENT_FOLDERS):
            continue
        by_name[name].append(path)
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"file names used by more than one module (name each for what it is): {shared}"


def test_no_module_is_longer_than_the_limit() -> None:
    long = {}
    for path in _modules():
        lines = len((ROOT / path).read_text().splitlines())
        if lines > OVER.get(path, MAX_LINES):
            long[path] = lines
    assert not long, f"modules over {MAX_LINES} lines (split them by responsibility): {long}"


def test_the_allowance_names_only_modules_still_over_the_limit() -> None:
    modules = set(_modules())
    stale = {p for p in OVER if p not in modules or len((ROOT / p).read_text().splitlines()) <= MAX_LINES}
    assert not stale, f"no longer over {MAX_LINES} lines (or gone): drop them from OVER: {stale}"


def _private(name: str) -> bool:
    # ``_meta`` is how Django's models publish their options: public in all but its name
    return name.startswith("_") and not name.startswith("__") and name != "_meta"


def test_no_module_imports_another_modules_private_name() -> None:
    found = []
    for path in _modules():
        if not path.startswith(PACKAGES):
            continue
        tree = ast.parse((ROOT / path).read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGES)):
                found += [f"{path}:{node.lineno} imports {a.name}" for a in node.names if _private(a.name)]
                modules |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith(PACKAGES)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                if _private(node.attr):
                    found.append(f"{path}:{node.lineno} reads {node.value.id}.{node.attr}")
    assert not found, f"private names used outside their module (make them public, or keep them home): {found}"


#: what a measurement looks like in prose: milliseconds, a share of something, "measured", a
#: profiler's name, a CPU cost or a speed-up (a heuristic: a timeout or a price is not a figure)
FIGURE = re.compile(
    r"\d[\d,.]*\s?(ms|µs)\b|\d+(\.\d+)?\s?% of|\bmeasured\b|\bpy-spy\b|\bs of CPU\b"
    r"|\b(a third|a fifth|a quarter|half) (the|of|more|less)\b.{0,20}(CPU|ms)|\d+(\.\d+)?x (faster|slower)"
)


def _prose(source: str) -> list[tuple[int, str]]:
    """The comments and docstrings of a module, with their lines."""
    found = [
        (t.start[0], t.string)
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((node.body[0].lineno, doc))
    return found


def test_figures_live_in_the_docs_not_in_comments() -> None:
    found = []
    for path in _modules():
        if not path.startswith(PACKAGES) or path.startswith("bench/"):
            continue
        for line, text in _prose((ROOT / path).read_text()):
            found += [f"{path}:{line}: …{text[max(0, m.start() - 40) : m.end() + 20]}…" for m in FIGURE.finditer(text)]
    assert not found, f"figures in comments (move them to docs/ or a bench's output): {found}"


def test_the_figure_pattern_finds_figures() -> None:
    assert FIGURE.search("cost a new session's first message 0.3 ms")
    assert FIGURE.search("(about 12% of its request path's CPU in a worker: py-spy)")
    assert not FIGURE.search("waits 30 s for the lock; the template half of sessions_app.times")
