"""A streamed Messages API call's HTTP request and its server-sent events, with the per-call work
of the ``anthropic`` SDK's generic request path left out where it is the same for every call.

``messages.with_streaming_response.create`` walks and copies the body (looking for files to
read), copies its request options (a pydantic model) twice, folds the SDK's header layers into
headers, merges the path into the base URL and the client's default headers into the request's
(checking each header's encoding as it goes), all per call, although on one client only the body
differs from one call to the next. A :class:`Poster` asks the SDK once per client for the request
its ``_build_request`` makes for ``POST /v1/messages`` (headers with the credentials, the API
version and the SDK's own, the URL, the timeouts), then per call only encodes the body (as the
SDK does: compact JSON, UTF-8) and sends that request through the client's own HTTP client and
transport. A failure raises what the SDK raises for it: an ``APIStatusError`` made by the client
from a non-2xx response, ``APITimeoutError`` and ``APIConnectionError`` for the transport's.

Only on Anthropic's own API, without the beta path, the SDK's spans or middleware, or a
credentials provider that refreshes its token (``poster`` says None: the caller goes through
``messages.with_streaming_response.create``): Bedrock's and Vertex's clients route and sign each
request themselves.

On a worker's runner, whose clients use the SDK's aiohttp transport (``providers.long_lived_loop``),
the call goes to aiohttp itself (``Poster.session``: a connection pool of the poster's own, set
up as that transport sets up its own): the transport would take the request apart again per
call (its headers decoded one by one into aiohttp's, the timeouts rebuilt) and wrap the response
and each chunk of its body in httpx's objects, which only ``events`` reads. Its failures are the
transport's (``map_aiohttp_exceptions``), raised as the SDK raises them. Where a proxy is
configured in the environment, the call goes through the SDK's client (its proxy mounts).

``events`` decodes the server-sent events of a response as the SDK's ``SSEDecoder`` does
(lines end in CR, LF or CRLF; a blank line ends an event; ``:`` starts a comment), keeping only
what the provider reads: an event's name and its data, as bytes for ``json.loads``.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
import weakref
from typing import Any, AsyncIterator, Awaitable, Callable, ContextManager

import aiohttp
import anthropic
import httpx2
from anthropic._constants import DEFAULT_CONNECTION_LIMITS, RAW_RESPONSE_HEADER
from anthropic._models import FinalRequestOptions
from anthropic._vendor.httpx_aiohttp.transport import map_aiohttp_exceptions
from multidict import CIMultiDict

MESSAGES_PATH = "/v1/messages"

_POSTERS: weakref.WeakKeyDictionary[Any, Poster | None] = weakref.WeakKeyDictionary()
#: the SDK's JSON encoding of a body (``anthropic._utils._json.openapi_dumps``)
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class Poster:
    """``POST /v1/messages`` with ``stream: true`` on one SDK client (see the module's doc)."""

    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self.client = client
        self.http: httpx2.AsyncClient = client._client
        # the request the SDK builds for this path and client, the header
        # ``with_streaming_response`` adds included, as it would send it
        options = FinalRequestOptions.construct(
            method="post", url=MESSAGES_PATH, json_data={}, headers={RAW_RESPONSE_HEADER: "stream"}
        )
        template = client._build_request(options)
        headers = template.headers.copy()
        del headers["content-length"]  # the call's own body's
        self.url = template.url
        self.headers = headers
        self.extensions = template.extensions
        #: a worker's runner: the poster's own aiohttp pool (see the module), else None
        self.session: aiohttp.ClientSession | None = None
        if isinstance(self.http, anthropic.DefaultAioHttpClient) and not urllib.request.getproxies():
            self._direct()

    def _direct(self) -> None:
        """The request as the SDK's aiohttp transport hands it to aiohttp, made once: the headers
        in the order httpx sends them, the session's own (the body's length replaced in its
        place per call: aiohttp merges a call's headers into its session's), the timeouts."""
        probe = httpx2.Request("POST", self.url, headers=self.headers, content=b"-", extensions=self.extensions)
        wire_headers = CIMultiDict(probe.headers.multi_items())
        timeout = self.extensions.get("timeout", {})
        self._timeout = aiohttp.ClientTimeout(
            sock_connect=timeout.get("connect"), sock_read=timeout.get("read"), connect=timeout.get("pool")
        )
        self._url = str(self.url)
        limits = DEFAULT_CONNECTION_LIMITS  # the SDK's aiohttp client's (``platforms``)
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0,
            keepalive_timeout=limits.keepalive_expiry,
            ssl=httpx2.create_ssl_context(),
        )
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False, headers=wire_headers)

    def request(self, params: dict[str, Any]) -> httpx2.Request:
        """The HTTP request of a ``messages.create(**params, stream=True)`` call."""
        return httpx2.Request(
            "POST",
            self.url,
            headers=self.headers,
            content=self.body(params),
            extensions=self.extensions,
            cookies=self.http.cookies or None,
        )

    def body(self, params: dict[str, Any]) -> bytes:
        body = {k: v for k, v in params.items() if k != "extra_body"}
        body["stream"] = True
        if params.get("extra_body"):
            body.update(params["extra_body"])
        return _encode(body).encode()

    async def send(self, params: dict[str, Any]) -> httpx2.Response | Streamed:
        """The response of a successful call, its body not read yet (the caller closes it). A
        failure raises as the SDK's ``messages.create`` does without retries."""
        if self.session is None:
            return await self._send_httpx(params)
        content = self.body(params)
        try:
            with map_aiohttp_exceptions():
                response = await self.session.request(
                    "POST",
                    self._url,
                    headers={"content-length": str(len(content))},
                    data=content,
                    allow_redirects=False,
                    compress=False,
                    timeout=self._timeout,
                )
        except httpx2.TimeoutException as err:
            raise self.client._make_timeout_error(self.request(params), err) from err
        except anthropic.AnthropicError:
            raise
        except Exception as err:
            raise self.client._make_connection_error(self.request(params), err) from err
        if 200 <= response.status < 300:
            return Streamed(response, lambda: self.request(params))
        try:
            with map_aiohttp_exceptions():
                body = await response.read()
        finally:
            response.release()
        if 300 <= response.status < 400:  # the SDK's client follows a redirect: let it
            return await self._send_httpx(params)
        failed = httpx2.Response(
            response.status, headers=response.raw_headers, content=body, request=self.request(params)
        )
        raise self.client._make_status_error_from_response(failed) from None

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def _send_httpx(self, params: dict[str, Any]) -> httpx2.Response:
        request = self.request(params)
        try:
            response = await self.http.send(request, stream=True)
        except httpx2.TimeoutException as err:
            raise self.client._make_timeout_error(request, err) from err
        except anthropic.AnthropicError:
            raise
        except Exception as err:
            raise self.client._make_connection_error(request, err) from err
        if not response.is_success:
            await response.aread()
            raise self.client._make_status_error_from_response(response) from None
        return response


class Streamed:
    """A successful call's response on aiohttp (``Poster.session``): its body's chunks as they
    come (``read``), read as the SDK's aiohttp transport reads them (its failures are that
    transport's)."""

    def __init__(self, response: aiohttp.ClientResponse, request: Callable[[], httpx2.Request]) -> None:
        self._response = response
        self._request = request
        #: the body's next chunk (b"" at its end), as aiohttp reads it: its failures are
        #: aiohttp's (the caller reads under ``map_aiohttp_exceptions``, see ``reading``)
        self.read: Callable[[], Awaitable[bytes]] = response.content.readany

    def http_response(self) -> httpx2.Response:
        """The response as the SDK's errors carry it (an ``error`` event in the stream)."""
        return httpx2.Response(self._response.status, headers=self._response.raw_headers, request=self._request())

    async def aclose(self) -> None:
        with map_aiohttp_exceptions():
            await self._response.__aexit__(None, None, None)


def reading(response: httpx2.Response | Streamed) -> tuple[Callable[[], Awaitable[bytes]], ContextManager[Any]]:
    """``(read, errors)``: ``read()`` is the response body's next chunk (b"" at its end), and a
    read's failure under ``with errors:`` raises what the SDK's transport raises for it. On
    aiohttp (``Streamed``) a chunk is read straight off aiohttp's stream, not through a
    generator around it: the same chunks, one hand-off fewer each."""
    if isinstance(response, Streamed):
        return response.read, map_aiohttp_exceptions()
    return reader(response.aiter_bytes()), contextlib.nullcontext()


def reader(chunks: AsyncIterator[bytes]) -> Callable[[], Awaitable[bytes]]:
    """``read()`` of an iterator of chunks: its next non-empty chunk, b"" at its end."""
    it = chunks.__aiter__()

    async def read() -> bytes:
        async for chunk in it:
            if chunk:
                return chunk
        return b""

    return read


def http_response(response: httpx2.Response | Streamed) -> httpx2.Response:
    return response.http_response() if isinstance(response, Streamed) else response


async def close(clients: Any) -> None:
    """Close the aiohttp pools of the posters of ``clients`` (their loop is ending)."""
    for client in clients:
        found = _POSTERS.pop(client, None)
        if found is not None:
            await found.aclose()


def poster(client: Any) -> Poster | None:
    """The client's :class:`Poster` (made once), or None where the SDK's own path must run."""
    try:
        return _POSTERS[client]
    except KeyError:
        pass
    found = None
    if (
        type(client) is anthropic.AsyncAnthropic
        and client.custom_auth is None  # a token provider's auth may refresh per request
        and client._tracer is None  # the SDK's spans are its request path's
        and not client.middleware
    ):
        found = Poster(client)
    _POSTERS[client] = found
    return found


async def events(read: Callable[[], Awaitable[bytes]]) -> AsyncIterator[tuple[bytes, bytes]]:
    """``(name, data)`` of each server-sent event with a name and data, ``ping`` left out, from
    the chunks ``read()`` returns until b"" (``reading``)."""
    buffer = b""
    while chunk := await read():
        text = buffer + chunk if buffer else chunk
        held = b""
        if b"\r" in text:
            if text.endswith(b"\r") and text[-2:-1] not in (b"\r", b"\n"):
                # perhaps the first half of a CRLF: it ends a line, but the LF after it must
                # not end another (after a line end, the CR ends an event either way)
                text, held = text[:-1], b"\r"
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n\n" not in text:
            buffer = text + held
            continue
        blocks = text.split(b"\n\n")
        buffer = blocks.pop() + held  # an event still to end
        for block in blocks:
            # the API's every event: ``event: <name>``, then one ``data: <json>`` line
            if block[:7] == b"event: ":
                head, cut, value = block.partition(b"\ndata: ")
                if cut and b"\n" not in head and b"\n" not in value:
                    name = head[7:]
                    if name and name != b"ping" and value:
                        yield name, value
                    continue
            name = b""
            data: list[bytes] = []
            for line in block.split(b"\n"):
                if not line or line[0] == 0x3A:  # a blank line (before the block) or a comment
                    continue
                field, _, value = line.partition(b":")
                if value[:1] == b" ":
                    value = value[1:]
                if field == b"event":
                    name = value
                elif field == b"data":
                    data.append(value)
            if name and name != b"ping" and data:
                joined = b"\n".join(data)
                if joined:
                    yield name, joined
