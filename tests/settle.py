"""Tasks an asyncio test left running, stopped before its loop closes."""

from __future__ import annotations

import asyncio


async def settle_tasks(tries: int = 50) -> None:
    """Stop what an example left running on its loop (a consumer, the origin check's denier,
    their channel layer receives) before the loop closes (``async_to_sync``'s or
    pytest-asyncio's), cancelling again what outlives a cancellation: redis-py can swallow a
    cancellation that lands in a blocking command (redis/redis-py#2028), and the layer's receive
    then loops on BZPOPMIN for good, so the loop's close waited on it forever (a CI run hung 300 s
    here; a probe: 2 examples in about 4,000 on PostgreSQL + Redis). Fails, naming the tasks, if
    they will not stop."""
    current = asyncio.current_task()
    rest: list[asyncio.Task] = []
    for _ in range(tries):
        rest = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if not rest:
            return
        for task in rest:
            task.cancel()
        await asyncio.wait(rest, timeout=0.2)
    raise AssertionError(f"tasks that outlive {tries} cancellations: {rest}")
