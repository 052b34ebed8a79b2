#!/usr/bin/env python
"""Instructions per turn by function: the difference of two callgrind runs of
``count_short.py`` (N_high and N_low turns; a file, or the folder of a run's files by thread),
divided by the turns between them.

    bench/count_diff.py LOW HIGH TURNS [top]
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter


def by_function(path: str, inclusive: bool) -> Counter[str]:
    from pathlib import Path

    if Path(path).is_dir():  # a run's files, one per thread
        found: Counter[str] = Counter()
        for file in sorted(Path(path).glob("callgrind.out-*")):
            found.update(by_function(str(file), inclusive))
        return found
    out = subprocess.run(
        ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = Counter()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$", line) or re.match(r"\s*([\d,]+)\s+(\S.*)$", line)
        if m and not m.group(2).startswith(("PROGRAM TOTALS", "Ir")):
            found[m.group(2).strip()] += int(m.group(1).replace(",", ""))
    return found


def main() -> None:
    low, high, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    for inclusive in (False, True):
        diff = by_function(high, inclusive)
        diff.subtract(by_function(low, inclusive))
        print(f"-- {'inclusive' if inclusive else 'self'}, instructions per turn --")
        for name, n in diff.most_common(top):
            print(f"{n / turns:12,.0f}  {name}")


if __name__ == "__main__":
    main()
