"""Bench-only probe (bench/bench_soak.py puts this folder on the workers' PYTHONPATH): when
JUNE_GC_PROBE names a folder, every process records its garbage collections' pauses by
generation and writes them to ``<folder>/<pid>.json`` every ``EVERY`` collections (a worker is
killed, never exited, so nothing waits for atexit): per generation the count, total and longest
pause (ms), and every generation-2 pause with the process's collection count at the time and
whether the heap was frozen yet (rare: the list stays small, so the probe adds no memory growth
of its own). A worker's start-up ends with a full collection and ``gc.freeze()``
(``sessions_app.apps._freeze_heap``): that collection, before any task, is recorded as not
frozen, and every later one as frozen — the hot path's. Costs a perf_counter per collection."""

from __future__ import annotations

import gc
import json
import os
import time

_dir = os.environ.get("JUNE_GC_PROBE")
EVERY = 5

if _dir:
    _state: dict = {"pid": None}

    def _reset() -> None:
        """Per process: a forked child starts with no figures of its parent's."""
        _state.update(
            pid=os.getpid(), started=0.0, n=0, gens={0: [0, 0.0, 0.0], 1: [0, 0.0, 0.0], 2: [0, 0.0, 0.0]}, gen2=[]
        )

    def _probe(phase: str, info: dict) -> None:
        if _state["pid"] != os.getpid():
            _reset()
        if phase == "start":
            _state["started"] = time.perf_counter()
            _state["frozen"] = gc.get_freeze_count() > 0
            return
        ms = (time.perf_counter() - _state["started"]) * 1000
        g = _state["gens"][info["generation"]]
        g[0], g[1], g[2] = g[0] + 1, g[1] + ms, max(g[2], ms)
        if info["generation"] == 2:
            _state["gen2"].append((_state["n"], ms, _state["frozen"]))
        _state["n"] += 1
        if _state["n"] % EVERY == 0:
            _write()

    def _write() -> None:
        path = os.path.join(_dir, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(
                {
                    "pid": os.getpid(),
                    "frozen": gc.get_freeze_count(),
                    "collections": _state["n"],
                    "gens": {str(k): v for k, v in _state["gens"].items()},
                    "gen2": _state["gen2"],
                },
                f,
            )
        os.replace(path + ".tmp", path)

    gc.callbacks.append(_probe)
