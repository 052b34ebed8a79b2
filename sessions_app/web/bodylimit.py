"""Request bodies bounded before they are read (docs/operations.md "Request bodies").

Every path has a largest body: the one its view declares (``june_max_body``, an int or a
callable without arguments: an attachment's upload, a multipart start, the webhook, the health
probes' 0), else ``JUNE_MAX_BODY_BYTES``. A body over it is refused with a JSON 413 by its
declared ``Content-Length`` before a byte of it is read, and a chunked one as it streams, once
it passes the limit — never after it was stored.

Two places enforce it, because servers differ in when an application sees a request:

- ``BodyLimit``, an ASGI middleware in front of Django (``june.asgi.http_application``), for
  servers that stream the body to the application as it arrives (uvicorn, hypercorn);
- ``guard_daphne()`` for daphne, which reads the whole body into a temporary file (Twisted's
  ``Request.content``: memory under 100 kB, disk above) before the application is even called,
  so no ASGI middleware can refuse it in time. It hooks Twisted's ``Request.gotLength``, the call
  that comes once the headers are parsed and before the body: over the limit it answers the 413
  itself and discards the rest; a chunked body gets a content file that refuses the chunk that
  passes the limit. Daphne has no setting of its own for this (4.2: none). The hook reads one
  internal of Twisted's (``HTTPChannel._path``, the request line's path, before ``Request.uri``
  is set); without it every path gets the site's largest limit (a test pins it).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from django.urls import Resolver404, ResolverMatch, get_urlconf, resolve

from sessions_app.attachment_services import max_body_bytes

log = logging.getLogger(__name__)

#: the attribute a view declares its largest body with (functools.wraps carries it outwards)
ATTR = "june_max_body"
#: after a refusal, how long (seconds) and how much (bytes) of what the client still sends is
#: read and dropped so that it reads the 413 before the connection closes (a close with unread
#: data is a TCP reset, which can destroy the answer in the client's buffer)
LINGER_SECONDS = 2.0
LINGER_BYTES = 4 * 1024 * 1024


def max_body(limit: int | Callable[[], int]) -> Callable[[Callable], Callable]:
    """Declare a view's largest request body (bytes, or a callable reading the settings)."""

    def declare(view: Callable) -> Callable:
        setattr(view, ATTR, limit)
        return view

    return declare


#: what the view of each recently asked path declares: under daphne a request asks twice (its
#: headers, ``guard_daphne``; the application, ``BodyLimit``), and resolving the path was a
#: visible share of daphne's CPU under a burst of ``POST …/turns``. Keyed by the URLconf and the
#: path (a path names its view for good); bounded
_declared: OrderedDict[tuple[str, str], Any] = OrderedDict()
DECLARED_KEPT = 2048


#: (URLconf, path) -> the route resolved for a start's headers (``guard_daphne``: a ``POST
#: …/turns``), for the start pool's handler to take (``take_match``) instead of resolving the
#: path again: routes of the site's URLconf (``ROOT_URLCONF``) only, each taken once; bounded
_matches: OrderedDict[tuple[str, str], ResolverMatch] = OrderedDict()
MATCHES_KEPT = 4096


#: ``_declared``'s entry for a path no route takes
NO_ROUTE = object()
#: ``has_route``'s default: a path ``_declared`` holds nothing for
_UNKNOWN = object()


def limit_for(path_info: str, *, keep_match: bool = False) -> int:
    """The largest body a request to ``path_info`` may carry (its view's, else the default).
    ``keep_match``: a start's path, which the start pool serves next: the route resolved here,
    if it was, is kept for ``take_match``."""
    key = (str(get_urlconf() or settings.ROOT_URLCONF), path_info)
    try:
        declared = _declared[key]
    except KeyError:
        try:
            match = resolve(path_info)
            declared = getattr(match.func, ATTR, None)
        except Resolver404:
            declared = NO_ROUTE
        else:
            if keep_match and get_urlconf() is None:
                _matches[(str(settings.ROOT_URLCONF), path_info)] = match
                if len(_matches) > MATCHES_KEPT:
                    _matches.popitem(last=False)
        _declared[key] = declared
        if len(_declared) > DECLARED_KEPT:
            _declared.popitem(last=False)
    if declared is None or declared is NO_ROUTE:
        return int(settings.JUNE_MAX_BODY_BYTES)
    return int(declared() if callable(declared) else declared)


def has_route(path_info: str) -> bool | None:
    """Whether ``ROOT_URLCONF`` has a route for ``path_info``, as ``limit_for`` found when it
    resolved the path (under daphne: at every request's headers); None when it has not lately."""
    declared = _declared.get((str(settings.ROOT_URLCONF), path_info), _UNKNOWN)
    return None if declared is _UNKNOWN else declared is not NO_ROUTE


def take_match(path_info: str) -> ResolverMatch | None:
    """The route ``limit_for`` kept for ``path_info`` (resolved by ``ROOT_URLCONF``), once."""
    return _matches.pop((str(settings.ROOT_URLCONF), path_info), None)


def refusal_body(limit: int) -> bytes:
    message = f"the body is larger than {limit:,} bytes" if limit else "this path takes no request body"
    return json.dumps({"error": {"code": "payload_too_large", "message": message}}).encode()


def _path_info(path: str, root_path: str) -> str:
    script = settings.FORCE_SCRIPT_NAME or root_path
    if script and path.startswith(script):
        path = path[len(script) :]
    return path or "/"


# -- any ASGI server --------------------------------------------------------------------------------

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class BodyLimit:
    """ASGI middleware: a declared ``Content-Length`` over the path's limit is a 413 before the
    application runs; a body that passes the limit as it streams ends the application's reading
    (``http.disconnect``: Django then answers nothing) and is a 413, if nothing was answered yet."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = limit_for(_path_info(scope["path"], scope.get("root_path", "")))
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await _refuse(send, limit)
        state = {"read": 0, "over": False, "started": False}

        async def counted() -> dict[str, Any]:
            if state["over"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > limit:
                    state["over"] = True
                    return {"type": "http.disconnect"}
            return message

        async def tracked(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, counted, tracked)
        if state["over"] and not state["started"]:
            await _refuse(send, limit)


async def _refuse(send: Send, limit: int) -> None:
    body = refusal_body(limit)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# -- daphne (Twisted) ---------------------------------------------------------------------------------


def guard_daphne() -> None:
    """Bound every body daphne reads (module docstring); nothing to do without daphne."""
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:
        return
    if getattr(WebRequest, "_june_body_limit", False):
        return
    got_length = WebRequest.gotLength

    def bounded_got_length(request: Any, length: int | None) -> None:
        try:
            path = unquote(request.channel._path.split(b"?", 1)[0].decode("latin-1"))  # not parsed yet: the line
            start = path.endswith("/turns") and getattr(request.channel, "_command", None) == b"POST"
            limit = limit_for(_path_info(path, getattr(request.server, "root_path", "") or ""), keep_match=start)
        except Exception:  # Twisted's internals moved (tests/unit/test_bodylimit.py): the largest limit
            log.warning("body limit: the request's path is unknown", exc_info=True)
            limit = max(int(settings.JUNE_MAX_BODY_BYTES), max_body_bytes())
        if length is not None and length > limit:
            got_length(request, 0)  # an empty in-memory content: nothing is stored
            _refuse_on_channel(request.channel, limit)
            return
        got_length(request, length)
        if length is None:
            request.content = _CappedContent(request.content, limit, request.channel)

    WebRequest.gotLength = bounded_got_length
    WebRequest._june_body_limit = True


class _CappedContent:
    """A chunked body's content file that refuses the chunk that takes it past ``limit``."""

    def __init__(self, content: Any, limit: int, channel: Any) -> None:
        self._content, self._limit, self._channel = content, limit, channel
        self.written = 0
        self.refused = False

    def write(self, data: bytes) -> None:
        if self.refused:
            return
        if self.written + len(data) > self._limit:
            self.refused = True
            self._content.close()  # what was spooled goes now (a temporary file: deleted)
            _refuse_on_channel(self._channel, self._limit)
            return
        self.written += len(data)
        self._content.write(data)

    def __getattr__(self, name: str) -> Any:  # seek, read, close, closed: the real file's
        return getattr(self._content, name)


def _refuse_on_channel(channel: Any, limit: int) -> None:
    """Answer 413 on the connection itself and stop the request: what the client still sends is
    dropped (never parsed, never stored, never given to the application), for a short linger so
    it reads the answer, then the connection closes."""
    if getattr(channel, "_june_refused", False):
        return
    channel._june_refused = True
    dropped = [0]

    def drop(data: bytes) -> None:
        dropped[0] += len(data)
        if dropped[0] > LINGER_BYTES:
            channel.transport.abortConnection()

    # the channel's own methods, shadowed on this instance: no more parsing, no 100-continue, and
    # the request never reaches daphne's process() (allContentReceived is what calls it)
    channel.dataReceived = channel.rawDataReceived = channel.lineReceived = drop
    channel.allContentReceived = channel._send100Continue = lambda *args: None
    body = refusal_body(limit)
    channel.transport.write(
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    try:
        channel.transport.loseWriteConnection()  # the answer, then FIN; reading goes on (drop)
    except AttributeError:  # a transport that cannot half-close
        channel.transport.loseConnection()
        return
    from twisted.internet import reactor

    later = reactor.callLater(LINGER_SECONDS, channel.transport.abortConnection)
    lost = channel.connectionLost

    def connection_lost(reason: Any) -> None:
        if later.active():
            later.cancel()
        lost(reason)

    channel.connectionLost = connection_lost
