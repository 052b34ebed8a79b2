"""The docs stay true: every link between them resolves, every file or folder of this repository
they name exists, every ``JUNE_*`` setting they name is one June declares, and they name no
issue numbers (words that mean nothing to a reader)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "bench").glob("README.md")])
#: the top folders of this repository: a backticked path starting with one must exist
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")} - {"var"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`([A-Za-z_][\w./-]*/[\w./-]*(?:\.(?:py|md|html|js|css|toml|json|txt|sh|service|jsonl)|/))`")
#: the packages a doc's short path (``store/lease.py``, ``runtime/loop.py``) may start inside
PACKAGES = [ROOT / "sessions_app", ROOT / "agents_app", ROOT / "june", ROOT / "june_evals"]
#: their folders: a backticked path starting with one (and no top folder) must exist in one of them
SHORT = {d.name for pkg in PACKAGES for d in pkg.iterdir() if d.is_dir() and d.name[0] not in "_."}
#: pages that name files of the reader's own project (a host project), not of this repository
HOST_PAGES = {"install.md"}
SETTING = re.compile(r"\bJUNE_[A-Z0-9_]*[A-Z0-9]\b")
ISSUE = re.compile(r"\bissues? #?\d+\b", re.I)


def _settings_source() -> str:
    return "\n".join(
        p.read_text()
        for p in [ROOT / "june" / "settings.py", ROOT / "june_project" / "settings.py", ROOT / "dev.py"]
        + sorted((ROOT / "june").rglob("*.py"))
        + sorted((ROOT / "sessions_app").rglob("*.py"))
        + sorted((ROOT / "agents_app").rglob("*.py"))
        + sorted((ROOT / "tests").rglob("*.py"))
        + sorted((ROOT / "bench").rglob("*.py"))
        if p.exists()
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # another site, a mail address, an anchor of the page itself
        path = target.split("#")[0]
        if path and not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing: {broken}"


def _named(path: str) -> bool:
    """Whether ``path`` names a file of this repository (not someone else's project, a pattern,
    a placeholder)."""
    return path.split("/")[0] in TOP | SHORT and "<" not in path and "*" not in path


def _exists(path: str) -> bool:
    bases = [ROOT] if path.split("/")[0] in TOP else PACKAGES
    candidates = [base / path.split("::")[0] for base in bases]
    return any(c.exists() or c.with_suffix(".py").exists() for c in candidates)


def test_short_paths_are_checked_inside_the_packages() -> None:
    assert _named("store/lease.py") and _exists("store/lease.py") and _exists("runtime/loop.py")
    assert _named("store/control.py") and not _exists("store/control.py")  # a module renamed away
    assert not _named("mysite/settings.py")  # a host project's


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(page: Path) -> None:
    if page.name in HOST_PAGES:
        return
    missing = [path for path in CODE_PATH.findall(page.read_text()) if _named(path) and not _exists(path)]
    assert not missing, f"{page.name}: names files that do not exist: {missing}"


def test_named_settings_exist() -> None:
    source = _settings_source()
    unknown = {}
    for page in PAGES:
        for name in set(SETTING.findall(page.read_text())):
            if name not in source:
                unknown.setdefault(page.name, []).append(name)
    assert not unknown, f"settings the docs name and no code reads: {unknown}"


@pytest.mark.parametrize("page", [*PAGES, ROOT / "CHANGELOG.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers(page: Path) -> None:
    found = [m.group(0) for m in ISSUE.finditer(page.read_text())]
    assert not found, f"{page.name} names issues, which mean nothing to a reader: {found}"
