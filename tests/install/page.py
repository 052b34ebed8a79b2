"""docs/install.md as data: its marked blocks, in order, each saying where it goes.

A block is a fenced code block right after a comment ``<!-- june-install: ACTION [PATH] [(TAG)] -->``:

- ``run``: shell commands, run in order in the project's folder (``cd`` moves it);
- ``serve``: long-running processes, one a line (the web process and the worker);
- ``append PATH`` / ``create PATH`` / ``replace PATH``: a file of the project, relative to the
  folder the commands run in;
- a ``(TAG)`` limits a block to the builds that ask for it (``postgres``: PostgreSQL + Redis;
  ``api``: the token and curl of the page's API example).

Nothing else of the page is read: what a reader sees is what the test applies."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "install.md"
ACTIONS = {"run", "serve", "append", "create", "replace"}


def _mark(marker: str) -> re.Pattern[str]:
    return re.compile(
        rf"^<!-- {marker}: (\w+)(?: ([^\s(]+))?(?: \(([\w ]+)\))? -->\n```[\w-]*\n(.*?)\n```", re.S | re.M
    )


@dataclass(frozen=True)
class Block:
    action: str
    path: str
    tag: str
    text: str

    @property
    def lines(self) -> list[str]:
        """The lines a developer pastes or types (blank lines and whole-line comments aside)."""
        return [line for line in self.text.splitlines() if line.strip() and not line.strip().startswith("#")]


def blocks(text: str | None = None, *, marker: str = "june-install") -> list[Block]:
    """The page's marked blocks, in order; a marker this parser does not know fails loudly.
    ``marker``: ``june-host`` marks the blocks of docs/testing.md and docs/evals.md, applied to
    the project this page builds (``(TAG)`` there: ``exits N``, a command's expected status)."""
    text = PAGE.read_text() if text is None else text
    found = [Block(m[1], m[2] or "", m[3] or "", m[4]) for m in _mark(marker).finditer(text)]
    unknown = [b.action for b in found if b.action not in ACTIONS]
    if unknown:
        raise ValueError(f"{marker}: unknown block actions {unknown}")
    markers = len(re.findall(rf"^<!-- {marker}:", text, re.M))
    if markers != len(found):
        raise ValueError(f"{marker}: {markers} markers but {len(found)} marked code blocks")
    return found


def for_build(all_blocks: list[Block], tags: set[str]) -> list[Block]:
    return [b for b in all_blocks if not b.tag or b.tag in tags]


def commands(block: Block) -> list[str]:
    """A shell block's commands: continuation lines joined, comments kept (the shell drops them)."""
    return [c for c in block.text.replace("\\\n", " ").splitlines() if c.strip()]
