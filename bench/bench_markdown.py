#!/usr/bin/env python
"""The chat's Markdown renderer against the server's, on the same texts:

    .venv/bin/python bench/bench_markdown.py [--rounds 20]

The browser's markdown-it (``static/june/chat/markdown.js``'s ``markdownHtml``, run by node: the
sanitizer needs a DOM, so DOMPurify is not in the figure) and the server's markdown-it-py
(``markdown.markdown_html``) and its whole ``to_html`` (+ nh3), on the texts of
``tests/markdown_corpus.py``. Printed: ms per text each side (the best of ``--rounds``), the
ratio browser / server, and for hostile inputs (backtick runs, brackets, stars, quotes) the
browser's time at 2n characters over its time at n: about 2 means linear (the hand-written
renderer it replaced was cubic on backtick runs: 3,000 backticks took 5.3 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")

import django  # noqa: E402

django.setup()

from sessions_app import markdown  # noqa: E402
from tests.markdown_corpus import CORPUS  # noqa: E402

HOSTILE = {"backticks": "`", "brackets": "[x](", "stars": "*a", "quotes": ">", "emphasis": "_*"}
NODE = """
import { markdownHtml } from %s;
import { readFileSync } from "node:fs";
const { texts, rounds } = JSON.parse(readFileSync(0, "utf8"));
const best = (text) => { let b = Infinity; for (let i = 0; i < rounds; i++) { const t = performance.now(); markdownHtml(text); b = Math.min(b, performance.now() - t); } return b; };
for (const text of Object.values(texts)) markdownHtml(text);  // warm-up
process.stdout.write(JSON.stringify(Object.fromEntries(Object.entries(texts).map(([k, v]) => [k, best(v)]))));
"""


def best_ms(fn, text: str, rounds: int) -> float:
    fn(text)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    texts = dict(CORPUS)
    for name, unit in HOSTILE.items():
        for n in (10_000, 20_000):
            texts[f"{name}@{n}"] = unit * (n // len(unit))
    module = json.dumps((ROOT / "sessions_app" / "static" / "june" / "chat" / "markdown.js").as_uri())
    node = shutil.which("node") or sys.exit("node is missing")
    done = subprocess.run(
        [node, "--input-type=module", "-e", NODE % module],
        input=json.dumps({"texts": texts, "rounds": rounds}),
        capture_output=True,
        text=True,
        check=True,
    )
    browser = json.loads(done.stdout)
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}  (best of {rounds})")
    print(f"{'text':<20}{'chars':>8}{'browser ms':>12}{'server ms':>11}{'+nh3 ms':>9}{'b/s':>7}")
    for name, text in texts.items():
        server = best_ms(markdown.markdown_html, text, rounds)
        whole = best_ms(markdown.to_html, text, rounds)
        row = f"{name:<20}{len(text):>8}{browser[name]:>12.2f}{server:>11.2f}{whole:>9.2f}"
        print(row + f"{browser[name] / max(server, 1e-6):>7.2f}")
    print("browser time at 2n / at n (2 = linear):")
    for name in HOSTILE:
        print(f"  {name:<12}{browser[f'{name}@20000'] / max(browser[f'{name}@10000'], 1e-6):.2f}")


if __name__ == "__main__":
    main()
