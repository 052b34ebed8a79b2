#!/usr/bin/env python
"""What a fallback list costs a turn when its first provider is down:

    .venv/bin/python bench/bench_fallback.py [--calls 200]

Two local peers speaking the Messages API (``tests/provider/fake_messages_api``): the first answers
every request with 529 ``overloaded_error``, the second streams a short reply at once. A
``FallbackModel`` over [first, second] (Anthropic's API, then Vertex's path) against the second
peer called directly, the calls alternating, one at a time:

- before the breaker opens: each call first tries the dead provider (one retry after its backoff),
  so it pays about a backoff (0.4–0.5 s) per call, for ``BREAKER_FAILURES`` calls;
- after it opens: the dead provider is skipped; the extra latency per model step is what the list
  costs a turn (the goal: ≤ 50 ms).

Printed: the calls before the breaker opened and their extra time, then the median and p90 time
per call direct and through the list after it opened, and their difference and ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents_app.providers.anthropic import AnthropicModel  # noqa: E402
from agents_app.providers.fallback import BREAKER_FAILURES, Breaker, Candidate, FallbackModel  # noqa: E402
from agents_app.runtime.messages import Message, Role  # noqa: E402
from agents_app.runtime.model import ModelReply, ModelRequest  # noqa: E402
from tests.provider.fake_messages_api import FakeMessagesAPI, HTTPError, StreamBuilder  # noqa: E402

REQUEST = ModelRequest(system="", messages=(Message(Role.USER, text="hello"),), tools=())


async def one(model: object) -> float:
    began = time.perf_counter()
    async for chunk in model.stream(REQUEST):  # type: ignore[attr-defined]
        last = chunk
    assert isinstance(last, ModelReply), last
    return time.perf_counter() - began


def reply() -> object:
    return StreamBuilder().text("hello", " there").done()


async def main(calls: int) -> None:
    with FakeMessagesAPI() as dead, FakeMessagesAPI() as alive:
        dead.script(*[HTTPError(529, "overloaded_error", "Overloaded")] * (2 * BREAKER_FAILURES + 2))
        direct = AnthropicModel(
            platform="vertex",
            api_key="t",
            base_url=alive.base_url,
            prompt_cache=False,
            place={"region": "us-east5", "project_id": "p"},
        )
        listed = FallbackModel(
            [
                Candidate(
                    AnthropicModel(api_key="k", base_url=dead.base_url, max_retries=1, prompt_cache=False), Breaker()
                ),
                Candidate(direct, Breaker()),
            ]
        )
        before = []
        while listed.candidates[0].breaker.closed:
            alive.script(reply(), reply())
            base = await one(direct)
            before.append(await one(listed) - base)
        through, straight = [], []
        for _ in range(calls):
            alive.script(reply(), reply())
            straight.append(await one(direct))
            through.append(await one(listed))
        dead_after = len(dead.requests)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"before the breaker opened: {len(before)} calls, extra {', '.join(f'{x * 1000:.0f} ms' for x in before)}")
    print(f"requests to the dead provider in all: {dead_after} (none after the breaker opened)")

    def p(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000

    med_d, med_t = statistics.median(straight) * 1000, statistics.median(through) * 1000
    print(
        f"after it opened, {calls} calls each: direct p50 {med_d:.2f} ms p90 {p(straight, 0.9):.2f} ms; "
        f"through the list p50 {med_t:.2f} ms p90 {p(through, 0.9):.2f} ms"
    )
    print(
        f"extra per model step (p50): {med_t - med_d:.2f} ms; ratio list/direct {med_t / med_d:.3f} (goal: extra ≤ 50 ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    asyncio.run(main(parser.parse_args().calls))
