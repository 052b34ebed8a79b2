#!/usr/bin/env python
"""The hottest frames of a ``py-spy record -f raw`` file (collapsed stacks: one line per stack,
``frame;frame;… count``), by their own samples and by the samples they are on the stack of:

    .venv/bin/python bench/spy_top.py var/spy/daphne.txt [--top 30] [--match sessions_app]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

#: py-spy's frame: ``function (path/to/file.py:line)``; the line is dropped so a function is one row
FRAME = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")


def _name(frame: str) -> str:
    m = FRAME.match(frame)
    if not m:
        return frame
    func, path = m.groups()
    path = path.split("site-packages/")[-1].split("/wt-perf/")[-1].split("lib/python3.11/")[-1]
    return f"{func} ({path})"


def summary(path: Path, top: int = 30, match: str = "") -> str:
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [
            _name(f) for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")
        ]
        if not frames:
            continue
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    if not samples:
        return "(no samples)"
    rows = [f"{samples} samples"]
    keys = [k for k, _ in total.most_common() if match in k][:top]
    for k in keys:
        rows.append(f"{100 * own[k] / samples:5.1f} {100 * total[k] / samples:5.1f}  {k}")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--match", default="")
    a = p.parse_args()
    print(summary(Path(a.path), a.top, a.match))


if __name__ == "__main__":
    main()
