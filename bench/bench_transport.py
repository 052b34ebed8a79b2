#!/usr/bin/env python
"""CPU per streamed Messages API call, by the ``anthropic`` SDK's HTTP transport (issue 36):

    .venv/bin/python bench/bench_transport.py [--calls 600] [--concurrency 200] [--latency 0.5] [--rounds 2]

The provider's own client (``AnthropicModel.stream``, the raw events folded as a worker folds
them) against ``bench_concurrency``'s Messages API peer (a process of its own; 13 server-sent
events per answer, 5 of them text deltas spread over ``--latency`` seconds), ``--calls`` calls
with at most ``--concurrency`` at once on one event loop, as a worker's runner makes them:

- ``httpx``: the SDK's default transport (a loop that runs one turn and ends: ``asyncio.run``,
  the CLI, tests);
- ``aiohttp``: the SDK's ``aiohttp`` extra, which a worker's runner uses
  (``providers.long_lived_loop``).

Printed per round and transport: the process's CPU per call (ms), the wall time, and the
ratio aiohttp / httpx of the round (the rounds interleave the two: a noisy machine moves both).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_concurrency import PeerProcess  # noqa: E402


async def calls(transport: str, url: str, n: int, concurrency: int) -> tuple[float, float]:
    """(CPU seconds per call, wall seconds) for ``n`` calls through ``transport``."""
    import contextlib

    from agents_app.providers import long_lived_loop
    from agents_app.providers.anthropic import AnthropicModel
    from agents_app.runtime.messages import Message, Role
    from agents_app.runtime.model import ModelReply, ModelRequest

    async with contextlib.AsyncExitStack() as stack:
        if transport == "aiohttp":
            await stack.enter_async_context(long_lived_loop())
        model = AnthropicModel(api_key="bench", base_url=url, prompt_cache=False)
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            request = ModelRequest(system="", messages=(Message(Role.USER, f"hello [bench:t{i}]"),), tools=())
            async with gate:
                async for chunk in model.stream(request):
                    last = chunk
            assert isinstance(last, ModelReply), last

        await asyncio.gather(*(one(i) for i in range(min(50, n))))  # connections open, code warm
        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.gather(*(one(i) for i in range(n)))
        return (time.process_time() - cpu) / n, time.monotonic() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
    peer = PeerProcess(args.latency)
    try:
        print(f"load average {os.getloadavg()[0]:.2f}; {args.calls} calls, {args.concurrency} at once")
        for r in range(1, args.rounds + 1):
            figures = {}
            for transport in ("httpx", "aiohttp"):
                per_call, wall = asyncio.run(calls(transport, peer.url, args.calls, args.concurrency))
                figures[transport] = per_call
                print(f"round {r}  {transport:8} {per_call * 1000:6.2f} ms CPU per call   wall {wall:5.2f} s")
            print(f"round {r}  aiohttp / httpx = {figures['aiohttp'] / figures['httpx']:.2f}")
        print(f"load average {os.getloadavg()[0]:.2f}")
    finally:
        peer.stop()


if __name__ == "__main__":
    main()
