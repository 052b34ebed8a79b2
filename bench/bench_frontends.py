#!/usr/bin/env python
"""What each front-end adapter costs over June's own SSE, on the same turn:

    DJANGO_SETTINGS_MODULE=june_project.settings .venv/bin/python bench/bench_frontends.py [--deltas 400] [--rounds 5]

One turn's events as a follower yields them (``sse.SessionFollower``: the part every stream
shares, not measured here): ``turn.started``, a reply streamed in ``--deltas`` live deltas of
~12 characters (offsets as the sink sends them), its ``message.completed``, a tool call and its
result, a second reply of the same size, ``turn.completed``. Each adapter turns them into the
bytes it writes:

- ``june-sse``: June's own SSE (``sse.frame``: ``id:``, ``event:``, ``data:``);
- ``ui-message``: the AI SDK's UI message stream (``uimessage_chunks.UIChunks`` + ``sse``);
- ``ag-ui``: AG-UI events (``agui_events.AguiRun``, the ``ag-ui-protocol`` models, their JSON).

Printed: bytes per turn, CPU per delta (µs, the whole turn's CPU / the deltas, the best of
``--rounds`` after a warm-up), and each adapter's ratio to ``june-sse`` from the same round.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")

import django  # noqa: E402

django.setup()

from sessions_app.web.agui_events import AguiRun, encode  # noqa: E402
from sessions_app.web.sse import frame  # noqa: E402
from sessions_app.web.uimessage_chunks import UIChunks, sse  # noqa: E402

WORDS = "durable turns survive a reload and a crash; approvals wait for the right person. ".split()


def turn(deltas: int) -> list[tuple[int | None, dict[str, Any]]]:
    """(seq or None for a live delta, event JSON) of one turn with two streamed replies."""
    tid, out, seq = "t" * 32, [], 0

    def logged(data: dict[str, Any]) -> None:
        nonlocal seq
        seq += 1
        out.append((seq, {"turn_id": tid, **data}))

    def reply() -> None:
        text = ""
        for i in range(deltas):
            piece = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(2)) + " "
            out.append(
                (None, {"type": "message.delta", "turn_id": tid, "text": piece, "offset": len(text), "base": seq})
            )
            text += piece
        logged({"type": "message.completed", "text": text, "index": seq})

    logged({"type": "turn.started", "trigger": "inbound", "text": "stock mugs"})
    reply()
    logged({"type": "action.requested", "call": {"id": "toolu_01", "name": "lookup_stock", "input": {"item": "mugs"}}})
    logged({"type": "action.completed", "call_id": "toolu_01", "name": "lookup_stock", "result": {"in_stock": 37}})
    reply()
    logged({"type": "turn.completed", "text": "done"})
    return out


def june_sse(events: list[tuple[int | None, dict[str, Any]]]) -> int:
    return sum(len(frame(data, event=data["type"], seq=seq)) for seq, data in events)


def ui_message(events: list[tuple[int | None, dict[str, Any]]]) -> int:
    fold = UIChunks("t" * 32)
    size = sum(len(sse(c)) for c in fold.open())
    for _, data in events:
        size += sum(len(sse(c)) for c in fold.feed(data))
    return size + sum(len(sse(c)) for c in fold.close())


def ag_ui(events: list[tuple[int | None, dict[str, Any]]]) -> int:
    fold = AguiRun(thread_id="bench", run_id="run-1", turn_id="t" * 32, state={"june": {"turnId": "t" * 32}})
    size = sum(len(encode(e)) for e in fold.open())
    for _, data in events:
        size += sum(len(encode(e)) for e in fold.feed(data))
    return size + sum(len(encode(e)) for e in fold.close())


ADAPTERS: dict[str, Callable[[list[tuple[int | None, dict[str, Any]]]], int]] = {
    "june-sse": june_sse,
    "ui-message": ui_message,
    "ag-ui": ag_ui,
}


def cpu(adapter: Callable[..., int], events: list, repeat: int) -> float:
    start = time.process_time()
    for _ in range(repeat):
        adapter(events)
    return (time.process_time() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deltas", type=int, default=400, help="live deltas per reply (two replies a turn)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="turns folded per measurement")
    args = parser.parse_args()
    events = turn(args.deltas)
    n_deltas = sum(1 for seq, _ in events if seq is None)
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    print(f"one turn: {len(events)} events, {n_deltas} of them live deltas")
    for adapter in ADAPTERS.values():
        cpu(adapter, events, 3)  # warm
    best: dict[str, float] = {}
    ratios: dict[str, list[float]] = {name: [] for name in ADAPTERS}
    for _ in range(args.rounds):
        round_cpu = {name: cpu(fn, events, args.repeat) for name, fn in ADAPTERS.items()}
        for name, seconds in round_cpu.items():
            best[name] = min(best.get(name, seconds), seconds)
            ratios[name].append(seconds / round_cpu["june-sse"])
    print(f"{'adapter':<12} {'bytes/turn':>11} {'× june':>7} {'CPU µs/delta':>13} {'× june (median of rounds)':>26}")
    base = ADAPTERS["june-sse"](events)
    for name, fn in ADAPTERS.items():
        size = fn(events)
        ratio = sorted(ratios[name])[len(ratios[name]) // 2]
        print(f"{name:<12} {size:>11,} {size / base:>7.2f} {best[name] / n_deltas * 1e6:>13.2f} {ratio:>26.2f}")
    print(f"load average after: {open('/proc/loadavg').read().strip()}")


if __name__ == "__main__":
    main()
