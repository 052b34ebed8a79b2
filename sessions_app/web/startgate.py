"""The API's burst path, entered by a bounded number of requests at once.

Django under ASGI runs each request's synchronous part on a thread of its own, made for the
request (asgiref's ``ThreadSensitiveContext``) and ended with it. A burst of starts therefore
ran as many threads at once in one web process, each holding its request's objects, contending
for the GIL and, past the pool's size, waiting in its thread for a database connection; the
memory they took stayed with the process after the burst (docs/workers.md "A burst" has the
figures).

``StartGate`` lets at most ``JUNE_WEB_STARTS`` of these requests (default 100) into Django at
once; the others wait on the event loop, in the order they came, until one of those has begun
its answer (its 202). Nothing else is gated: a stream, a start that waits for its turn's end,
any other request enters at once. This is not the door that was removed (docs/workers.md "A
burst"): nothing waits for the queue or the workers, and every start is answered as soon as its
turn is durably queued. As few as the connection pool's size answered a burst later: a
request's round trips to the database no longer overlapped enough others' Python.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: ``?wait=`` values that ask for a 202 at once (as ``api_turns.NO_WAIT``)
NO_WAIT = frozenset({b"0", b"false", b"no", b"off"})


def starts_allowed() -> int:
    from django.conf import settings

    return max(int(settings.JUNE_WEB_STARTS), 1)


def is_start(scope: dict[str, Any]) -> bool:
    """``POST …/turns?wait=false`` that is not a stream: the API's burst path."""
    if scope.get("type") != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith("/turns"):
        return False
    query = scope.get("query_string") or b""
    wait = [v.strip().lower() for k, _, v in (p.partition(b"=") for p in query.split(b"&")) if k == b"wait"]
    if not wait or wait[-1] not in NO_WAIT:
        return False
    accept = b" ".join(v for k, v in scope.get("headers") or () if k.lower() == b"accept")
    return b"text/event-stream" not in accept


class StartGate:
    def __init__(self, app: Callable, limit: int | None = None) -> None:
        self.app = app
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if not is_start(scope):
            return await self.app(scope, receive, send)
        if self._slots is None:  # at the first start: the settings are read by then
            self._slots = asyncio.Semaphore(self.limit or starts_allowed())
        slots = self._slots
        await slots.acquire()
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                slots.release()

        async def answering(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                release()
            await send(message)

        try:
            await self.app(scope, receive, answering)
        finally:
            release()
