"""The import contract: agents_app.runtime is pure Python and asyncio, no Django, no SDK."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agents_app.runtime

RUNTIME = Path(agents_app.runtime.__file__).parent
FORBIDDEN = ("django", "channels", "django_q", "daphne", "sessions_app", "anthropic",
             "agents_app.providers", "agents_app.agents")


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against agents_app.runtime
                base = "agents_app.runtime" if node.level == 1 else "agents_app"
                mod = f"{base}.{node.module}" if node.module else base
                names.append(mod)
                names += [f"{mod}.{a.name}" for a in node.names]
            elif node.module:
                names.append(node.module)
                names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_the_checker_sees_forbidden_imports():
    assert _forbidden("django.db") and _forbidden("agents_app.providers.anthropic")
    assert not _forbidden("djangoish") and not _forbidden("agents_app.runtime.loop")


def test_no_runtime_module_imports_django_or_a_provider():
    files = sorted(RUNTIME.rglob("*.py"))
    assert len(files) >= 14
    bad = {str(p.relative_to(RUNTIME)): [n for n in _imports(p) if _forbidden(n)] for p in files}
    assert {k: v for k, v in bad.items() if v} == {}


def test_importing_the_runtime_loads_no_django():
    code = ("import sys, agents_app.runtime; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('django', 'channels', 'django_q', 'daphne', 'sessions_app', 'anthropic')"
            " or m.startswith(('agents_app.providers', 'agents_app.agents'))]; "
            "print(','.join(bad) or 'clean')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=RUNTIME.parent.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"
