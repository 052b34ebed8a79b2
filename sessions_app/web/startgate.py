"""The API's burst path, served whole on a bounded pool of threads.

Django under ASGI serves a request in three hand-offs between the server's event loop and a
thread made for the request (asgiref's ``ThreadSensitiveContext``) and ended with it: the
``request_started`` signal's receivers, the middleware and the view (``june.asgi.one_hop``), and
the response's ``close`` (``request_finished``); two tasks watch each request meanwhile (the view,
a disconnect). For a JSON ``POST …/turns?wait=false`` (a start answered 202 at once, a burst's
request) that machinery was a large share of a web process's CPU, while the start itself is a
few milliseconds of work on one thread and one database connection.

``StartGate`` serves these requests as a WSGI server serves any request: the body read on the
event loop, then the whole of Django's handling — ``request_started``, the middleware, the view,
the response and its ``close`` — in one hand-off to a thread of a pool of ``JUNE_WEB_STARTS``
threads (default 10), kept for the next request. At most that many starts are inside Django at
once; the others wait in the pool's queue, in the order they came. Nothing else goes through
the pool: a stream, a start that waits for its turn's end, a multipart start, any other request
is Django's ASGI handling, entered at once. Nothing waits for the queue or the workers
(docs/workers.md "A burst"). A start is one round trip to the database and the rest Python,
which one core runs at a time: a few threads keep the cores busy, and more only contend, for
the interpreter's lock, the database pool and the context-local settings Django reads under a
lock, each wait a switch of threads in the kernel, and each thread past the pool's warm
connections opens a backend of its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.urls import set_script_prefix

from sessions_app.web.bodylimit import take_match

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: (status, headers, body) of an answer, as ASGI sends them
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
#: ``?wait=`` values that ask for a 202 at once (as ``api_turns.NO_WAIT``)
NO_WAIT = frozenset({b"0", b"false", b"no", b"off"})


def starts_allowed() -> int:
    return max(int(settings.JUNE_WEB_STARTS), 1)


def is_start(scope: dict[str, Any]) -> bool:
    """``POST …/turns?wait=false`` with a JSON body, not a stream: the API's burst path."""
    if scope.get("type") != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith("/turns"):
        return False
    query = scope.get("query_string") or b""
    wait = [v.strip().lower() for k, _, v in (p.partition(b"=") for p in query.split(b"&")) if k == b"wait"]
    if not wait or wait[-1] not in NO_WAIT:
        return False
    headers = scope.get("headers") or ()
    accept = b" ".join(v for k, v in headers if k.lower() == b"accept")
    kind = b" ".join(v for k, v in headers if k.lower() == b"content-type")
    return b"text/event-stream" not in accept and not kind.lstrip().lower().startswith(b"multipart/")


class DjangoStart:
    """One request served as Django's WSGI handler serves one, on the calling thread, from an
    ASGI scope and its whole body: ``request_started``, the request (``ASGIRequest``, as
    Django's ASGI handler makes it), the synchronous middleware chain and the view, the
    response's headers as Django's ASGI handler sends them, and its ``close``
    (``request_finished``: the thread's database connection goes back, or is closed)."""

    def __init__(self, asgi: ASGIHandler) -> None:
        self.asgi = asgi  # its request class and checks (``create_request``)
        self.handler = _Handler()
        self.handler.load_middleware(is_async=False)

    def __call__(self, scope: dict[str, Any], body: Any) -> Answer:
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=ASGIHandler, scope=scope)
        request, response = self.asgi.create_request(scope, body)
        if request is not None:
            response = self.handler.get_response(request)
        try:
            headers = [
                (
                    k.encode("ascii") if isinstance(k, str) else bytes(k),
                    v.encode("latin1") if isinstance(v, str) else bytes(v),
                )
                for k, v in _header_items(response)
            ]
            headers += [(b"Set-Cookie", c.output(header="").encode("ascii").strip()) for c in response.cookies.values()]
            content = b"".join(response) if response.streaming else response.content
            return response.status_code, headers, content
        finally:
            response.close()
            body.close()
            if request is not None:
                _let_go(request)


def _let_go(request: Any) -> None:
    """Drop an answered request's attributes. Django's middleware leave a request in reference
    cycles (the lazy ``user`` and ``auser`` refer to the request, as do the message storages),
    so the request, with all it holds (its resolver match, session, body, storages), outlived
    its answer until the garbage collector's next pass over its generation: under a burst,
    thousands of objects a second for the collector to walk, and to promote into the older
    generations whose passes are the long ones. Nothing reads the request after its
    ``request_finished`` (``response.close``)."""
    request.__dict__.clear()


class _Handler(BaseHandler):
    """Django's handler, taking the route the body limit resolved for the request's headers
    (``bodylimit.take_match``: under daphne) rather than resolving the path a second time."""

    def resolve_request(self, request: Any) -> Any:
        if not hasattr(request, "urlconf"):  # else a middleware chose a URLconf: Django's way
            match = take_match(request.path_info)
            if match is not None:
                request.resolver_match = match
                return match
        return super().resolve_request(request)


def _header_items(response: Any) -> Any:
    """The response's (name, value) pairs, as ``response.items()`` gives them: read from the
    store of Django's header mapping (``CaseInsensitiveMapping._store``: its values are the
    pairs), which ``items()`` walks with a Python call per header, through the public call
    where a response's headers keep no such store."""
    store = getattr(response.headers, "_store", None)
    return store.values() if isinstance(store, dict) else response.items()


class StartGate:
    """ASGI middleware: starts (``is_start``) served by ``serve`` on a pool of ``limit`` threads
    (``JUNE_WEB_STARTS``), the rest by ``app``. Without ``serve`` (an application that is not
    Django's) every request goes to ``app``."""

    def __init__(self, app: Callable, serve: Callable[[dict[str, Any], Any], Answer] | None = None, limit: int = 0):
        self.app = app
        self.serve = serve
        self.limit = limit
        self._pool: ThreadPoolExecutor | None = None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if self.serve is None or not is_start(scope):
            return await self.app(scope, receive, send)
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before its body came
        if self._pool is None:  # at the first start: the settings are read by then
            self._pool = ThreadPoolExecutor(self.limit or starts_allowed(), thread_name_prefix="june-start")
        # each request in a context of its own, as a thread made for it would have
        done = self._pool.submit(contextvars.Context().run, self.serve, scope, body)
        status, headers, content = await asyncio.wrap_future(done)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


async def _read_body(receive: Receive) -> Any:
    """The request's body, as Django's ASGI handler reads it (memory, then a temporary file past
    ``FILE_UPLOAD_MAX_MEMORY_SIZE``); None if the client disconnected first."""
    body = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b")
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            body.close()
            return None
        body.write(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body.seek(0)
    return body
