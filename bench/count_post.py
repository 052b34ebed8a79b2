#!/usr/bin/env python
"""Python calls and database statements per ``POST …/turns?wait=false``, counted (not timed):
the bench's start (a bearer-token client starting the first turn of a new session) sent through
the site's whole ASGI application (``june_project.asgi``: the body limit, the start pool, Django's
handler, the middleware, the view, the store), in this process, one request at a time, on a
fresh SQLite file (or DATABASE_URL's PostgreSQL: the bench's database).

    .venv/bin/python bench/count_post.py                    # COUNT_POSTS (default 200) after 30 of warm-up
    .venv/bin/python bench/count_post.py --top 40           # and the files and functions called most
    .venv/bin/python bench/count_post.py --top 40 --owners  # and by the project's nearest caller
    .venv/bin/python bench/count_post.py --time-only        # CPU per POST only (for py-spy or perf)

Before the profiled POSTs, as many unprofiled ones, timed: their process CPU per POST (user and
system), which the machine's load moves; the counts below it do not. Counted on every thread
(``sys.setprofile``, ``threading.setprofile``, and set on the start pool's threads from inside
them): Python calls (a function's frame entered) and calls into C, per POST; statements per POST,
as Django's cursors execute them and as the store's wire batches them. The daphne hook's
resolve of the path at the request's headers (``bodylimit.guard_daphne``) is made here as it
does, so the start pool takes its route; Twisted's own parsing is not in these counts.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POSTS = int(os.environ.get("COUNT_POSTS", "200"))
WARMUP = 30
OWNERS = "--owners" in sys.argv


async def _post(app, token: str, key: str) -> int:
    from sessions_app.web.bodylimit import limit_for

    body = json.dumps({"text": "order blue mugs"}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/api/agents/ops/sessions/{key}/turns",
        "raw_path": f"/api/agents/ops/sessions/{key}/turns".encode(),
        "query_string": b"wait=false",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    limit_for(scope["path"], keep_match=True)  # as daphne's hook does at the request's headers (guard_daphne)
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"]


async def _posts(app, token: str, prefix: str, n: int) -> None:  # noqa: ANN001
    for i in range(n):
        status = await _post(app, token, f"{prefix}{i}")
        assert status == 202, status


def main() -> None:
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 0
    from bench.common import fresh_database, use_database

    os.environ["JUNE_Q_SYNC"] = "0"
    os.environ.setdefault("JUNE_PROCESS", "web")  # as daphne's: the pooled connections
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    os.environ.setdefault("JUNE_RATE_LIMITS", "0")
    use_database(os.environ.get("COUNT_POST_DB", "june_count_post"))
    fresh_database(os.environ.get("COUNT_POST_DB", "june_count_post"))
    from django.contrib.auth import get_user_model

    from june_project.asgi import application
    from sessions_app import models as m

    user = get_user_model().objects.create_user("bench")
    token = m.ApiToken.issue(user, name="bench")[1]
    loop = asyncio.new_event_loop()
    loop.run_until_complete(_posts(application, token, "w", WARMUP))

    cpu, times = time.process_time(), os.times()
    loop.run_until_complete(_posts(application, token, "t", POSTS))
    cpu = (time.process_time() - cpu) * 1000 / POSTS
    user, system = ((os.times()[i] - times[i]) * 1000 / POSTS for i in (0, 1))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"CPU per POST, unprofiled, one at a time: {cpu:.3f} ms (user {user:.2f}, system {system:.2f}; load {load})")
    if "--time-only" in sys.argv:
        return
    calls: Counter = Counter()
    owners: Counter = Counter()
    pairs: Counter = Counter()
    c_calls = Counter()
    statements = Counter()

    def prof(frame, event, arg):  # noqa: ANN001
        if event == "call":
            code = frame.f_code
            calls[(code.co_filename, code.co_firstlineno, code.co_name)] += 1
            if OWNERS:
                f = frame
                while f is not None and not any(
                    p in f.f_code.co_filename for p in ("sessions_app/", "agents_app/", "/june/")
                ):
                    f = f.f_back
                owner = "-" if f is None else f"{_short(f.f_code.co_filename)}:{f.f_code.co_name}"
                owners[owner] += 1
                pairs[(owner, f"{_short(code.co_filename)}:{code.co_firstlineno}:{code.co_name}")] += 1
        elif event == "c_call":
            c_calls[getattr(arg, "__qualname__", "?")] += 1

    from django.db.backends import utils

    from sessions_app.store import wire

    django_execute, wire_add = utils.CursorWrapper._execute, wire.Batch.add

    def counted_execute(self, sql, *args, **kwargs):  # noqa: ANN001
        statements["django " + sql.split(None, 1)[0].upper()] += 1
        return django_execute(self, sql, *args, **kwargs)

    def counted_add(self, sql, *args, **kwargs):  # noqa: ANN001
        statements["wire " + bytes(sql).split(None, 1)[0].decode().upper()] += 1
        return wire_add(self, sql, *args, **kwargs)

    utils.CursorWrapper._execute, wire.Batch.add = counted_execute, counted_add
    # the start pool's threads exist already (the warm-up): profile them too
    setall = getattr(threading, "setprofile_all_threads", None)
    if setall is not None:
        setall(prof)
    else:
        threading.setprofile(prof)
        sys.setprofile(prof)
        _install_in_pool(application, prof)
    loop.run_until_complete(_posts(application, token, "c", POSTS))
    (getattr(threading, "setprofile_all_threads", None) or threading.setprofile)(None)
    sys.setprofile(None)
    utils.CursorWrapper._execute, wire.Batch.add = django_execute, wire_add
    total = sum(calls.values())
    print(f"POSTs {POSTS}: Python calls per POST {total / POSTS:.0f}, C calls {sum(c_calls.values()) / POSTS:.0f}")
    print(
        f"statements per POST {sum(statements.values()) / POSTS:.2f}: "
        + ", ".join(f"{k} {v / POSTS:.2f}" for k, v in sorted(statements.items()))
    )
    if top:
        by_module: Counter = Counter()
        for (filename, _, _), n in calls.items():
            by_module[_short(filename)] += n
        print("by file, calls per POST:")
        for name, n in by_module.most_common(top):
            print(f"{n / POSTS:8.1f} {name}")
        if OWNERS:
            print("by the project's nearest caller, calls per POST:")
            for name, n in owners.most_common(top):
                print(f"{n / POSTS:8.1f} {name}")
            if os.environ.get("COUNT_PAIRS"):
                with open(os.environ["COUNT_PAIRS"], "w") as out:
                    for (owner, callee), n in pairs.most_common():
                        out.write(f"{n / POSTS:8.1f} {owner} -> {callee}\n")
        print("by function, calls per POST:")
        for (filename, line, name), n in calls.most_common(top):
            print(f"{n / POSTS:8.1f} {_short(filename)}:{line} {name}")


def _install_in_pool(application, prof) -> None:  # noqa: ANN001
    """Before Python 3.12: set the profiler on each of the start pool's threads, from inside it."""
    gate = application.application_mapping["http"].app  # BodyLimit -> StartGate
    pool = gate._pool
    if pool is None:
        return
    barrier = threading.Barrier(pool._max_workers)

    def install() -> None:
        sys.setprofile(prof)
        barrier.wait(5)

    for _ in range(pool._max_workers):
        pool.submit(install)


def _short(filename: str) -> str:
    for cut in ("site-packages/", str(ROOT) + "/", "lib/python3"):
        if cut in filename:
            return filename.split(cut, 1)[1]
    return filename


if __name__ == "__main__":
    main()
