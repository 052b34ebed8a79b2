"""dev.py's check of blocks written twice, where the library's ``duplicates`` command is not
installed (CI, a new machine): ten lines the same, blank lines, comments and indentation aside,
outside tests and migrations, and not a module's imports."""

from __future__ import annotations

from pathlib import Path

import dev

BLOCK = "\n".join(
    f"    total = total + {n}  # step {n}" if n % 3 else f"        value_{n} = compute({n})" for n in range(12)
)


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_ten_lines_written_twice_are_found(tmp_path):
    _write(tmp_path, "app/a.py", f"def a():\n{BLOCK}\n")
    _write(tmp_path, "app/b.py", f"# another file\n\ndef b():\n\n{BLOCK.replace('    ', '  ')}\n")
    assert list(dev.repeated_blocks(root=tmp_path)) == [("app/a.py", "app/b.py")]


def test_nine_lines_tests_migrations_and_imports_are_not(tmp_path):
    nine = "\n".join(BLOCK.splitlines()[:9])
    _write(tmp_path, "app/a.py", f"def a():\n{nine}\n")
    _write(tmp_path, "app/b.py", f"def b():\n{nine}\n")
    _write(tmp_path, "tests/test_a.py", f"def t():\n{BLOCK}\n")
    _write(tmp_path, "app/migrations/0001_x.py", f"def m():\n{BLOCK}\n")
    imports = "\n".join(f"import module_{n}" for n in range(12))
    _write(tmp_path, "app/c.py", f"{imports}\n")
    _write(tmp_path, "app/d.py", f"{imports}\n")
    assert dev.repeated_blocks(root=tmp_path) == {}


def test_this_tree_has_none():
    assert dev.repeated_blocks() == {}
