#!/usr/bin/env python
"""CPU per message of the server-less channel layer (``UnixSocketChannelLayer``), the embedded
default's, in one process:

    .venv/bin/python bench/bench_layer.py [--messages 20000] [--rounds 3]

A worker's sink sends every coalesced delta and every committed event of a turn to its
session's group; most sessions have nobody watching them. Printed per round, in microseconds of
the process's CPU:

- ``group_name``: the session's group name (``sink.group_name``), asked once per message;
- ``unwatched``: ``group_send`` to a session nobody watches (one ``listdir`` that finds no marks);
- ``watched``: ``group_send`` to a session a member of another layer watches, and that member's
  ``receive`` (one datagram over a unix socket, through the receiver's reader thread).

Compare two commits by running this file in each (``git stash``, or a worktree): the rounds
spread the noise of a shared machine; take the lowest of each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def one_round(messages: int) -> tuple[float, float, float]:
    from agents_app.runtime.seams import SessionRef
    from sessions_app.outbox.layers import UnixSocketChannelLayer
    from sessions_app.outbox.sink import group_name

    path = tempfile.mkdtemp(prefix="jbl", dir="/tmp")  # a unix socket's path is short
    try:
        member, sender = UnixSocketChannelLayer(path=path), UnixSocketChannelLayer(path=path)
        channel = await member.new_channel()
        await sender.new_channel()
        refs = [SessionRef("ops", f"bench-{i}") for i in range(1000)]
        watched = group_name(refs[0])
        await member.group_add(watched, channel)

        start = time.process_time()
        for i in range(messages):
            group_name(refs[i % 1000])
        names = (time.process_time() - start) / messages

        start = time.process_time()
        for i in range(messages):
            await sender.group_send(group_name(refs[1 + i % 999]), {"type": "message.delta", "text": "hello"})
        unwatched = (time.process_time() - start) / messages

        few = max(messages // 10, 1)
        start = time.process_time()
        for _ in range(few):
            await sender.group_send(watched, {"type": "message.delta", "text": "hello"})
            await asyncio.wait_for(member.receive(channel), 30)
        watched_cpu = (time.process_time() - start) / few
        return names, unwatched, watched_cpu
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "june_project.settings")
    os.environ.setdefault("SECRET_KEY", "bench-layer")
    import django

    django.setup()
    print(f"bench_layer: {args.messages} messages a round; load average {os.getloadavg()[0]:.2f}")
    print(f"{'round':>5}{'group_name us':>15}{'unwatched us':>14}{'watched us':>12}")
    for k in range(args.rounds):
        names, unwatched, watched = asyncio.run(one_round(args.messages))
        print(f"{k + 1:>5}{names * 1e6:15.2f}{unwatched * 1e6:14.2f}{watched * 1e6:12.1f}")


if __name__ == "__main__":
    main()
