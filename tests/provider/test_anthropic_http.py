"""``anthropic_http``: the request a streamed call sends is the SDK's, built once per client, and
its server-sent events decode as the SDK's decoder reads them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from typing import Any

import anthropic
import httpx2
import pytest

from agents_app.providers import anthropic_http, long_lived_loop
from agents_app.providers.anthropic import AnthropicModel
from agents_app.runtime.messages import Message, Role
from agents_app.runtime.model import ModelError, ModelReply, ModelRequest, ToolSpec

from .fake_messages_api import FakeMessagesAPI, HTTPError, StreamBuilder

TOOLS = (
    ToolSpec("get_time", "Local time in a timezone", {"type": "object", "properties": {"tz": {"type": "string"}}}),
)


@pytest.fixture(params=["httpx", "aiohttp"])
async def transport(request):
    """The SDK's default transport, and its aiohttp one (a worker's runner)."""
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "aiohttp":
            await stack.enter_async_context(long_lived_loop())
        yield request.param


def a_request(text: str = "héllo") -> ModelRequest:
    return ModelRequest(system="You are terse.", messages=(Message(Role.USER, text),), tools=TOOLS)


async def drain(model: AnthropicModel, request: ModelRequest) -> list[Any]:
    return [chunk async for chunk in model.stream(request)]


async def test_the_request_is_the_one_the_sdks_messages_create_sends(transport):
    """Same path, same headers (credentials, API version, the SDK's own) in the same order, the
    same JSON (extra_body merged in): the provider's call against the SDK's own for its params."""
    with FakeMessagesAPI() as api:
        model = AnthropicModel(api_key="test-key", base_url=api.base_url, temperature=0.5)
        assert anthropic_http.poster(model._client) is not None
        api.script(StreamBuilder().text("a").done(), StreamBuilder().text("b").done())
        request = a_request()
        await drain(model, request)
        async with model._client.messages.with_streaming_response.create(**model.params(request), stream=True) as r:
            await r.read()
        ours, sdks = api.requests
        assert ours.path == sdks.path == "/v1/messages"
        assert list(ours.headers.items()) == list(sdks.headers.items())
        assert ours.body == sdks.body and ours.body["stream"] is True and ours.body["temperature"] == 0.5
        assert "héllo".encode() in ours.raw  # UTF-8, not escaped, as the SDK encodes


async def test_a_call_does_not_rebuild_the_request_through_the_sdk(transport, monkeypatch):
    """The SDK's per-call request building runs once per client, not once per call."""
    with FakeMessagesAPI() as api:
        built: list[Any] = []
        real = anthropic.AsyncAnthropic._build_request

        def counting(self, *args, **kwargs):
            built.append(args)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(anthropic.AsyncAnthropic, "_build_request", counting)
        model = AnthropicModel(api_key="test-key", base_url=api.base_url)
        api.script(*(StreamBuilder().text(f"{i}").done() for i in range(3)))
        for _ in range(3):
            chunks = await drain(AnthropicModel(api_key="test-key", base_url=api.base_url), a_request())
            assert isinstance(chunks[-1], ModelReply)
        assert len(built) == 1 and model._client is AnthropicModel(api_key="test-key", base_url=api.base_url)._client


async def test_a_workers_call_goes_to_aiohttp_without_httpxs_client(transport, monkeypatch):
    """On a worker's runner (the SDK's aiohttp transport) a call is the poster's own aiohttp
    request: httpx's client takes no part in it; elsewhere the client carries every call."""
    sent: list[Any] = []
    real = httpx2.AsyncClient.send

    async def counting(self, *args, **kwargs):
        sent.append(args)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(httpx2.AsyncClient, "send", counting)
    with FakeMessagesAPI() as api:
        model = AnthropicModel(api_key="test-key", base_url=api.base_url)
        api.script(StreamBuilder().text("a").done(), StreamBuilder().text("b").done())
        assert (await drain(model, a_request()))[-1].text == "a"
        assert (await drain(model, a_request()))[-1].text == "b"
    poster = anthropic_http.poster(model._client)
    assert poster is not None and (poster.session is not None) == (transport == "aiohttp")
    assert len(sent) == (0 if transport == "aiohttp" else 2)


async def test_a_redirect_is_followed_by_the_sdks_client(transport):
    """A 3xx is the SDK's client's to follow (it does), on aiohttp as on httpx."""
    with FakeMessagesAPI() as api:
        model = AnthropicModel(api_key="test-key", base_url=api.base_url)
        moved = HTTPError(307, "moved", "elsewhere", headers={"location": f"{api.base_url}/v1/messages"})
        api.script(moved, StreamBuilder().text("there").done())
        assert (await drain(model, a_request()))[-1].text == "there"
        assert [r.path for r in api.requests] == ["/v1/messages", "/v1/messages"]


async def test_a_proxy_in_the_environment_keeps_the_sdks_client(monkeypatch):
    """The SDK's client mounts the environment's proxies; the poster's own pool would not."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    async with long_lived_loop():
        model = AnthropicModel(api_key="test-key", base_url="https://api.example.test")
        poster = anthropic_http.poster(model._client)
        assert poster is not None and poster.session is None


async def test_the_loops_end_closes_the_posters_pool():
    """``long_lived_loop`` closes what its clients opened, the posters' pools included."""
    async with long_lived_loop():
        model = AnthropicModel(api_key="test-key", base_url="http://127.0.0.1:9")
        poster = anthropic_http.poster(model._client)
        assert poster is not None and poster.session is not None and not poster.session.closed
    assert poster.session.closed


async def test_the_sdks_path_where_the_poster_would_differ(transport):
    """The beta path (server compaction) and a client with the SDK's spans go through
    ``messages.with_streaming_response.create``: no poster for a traced client."""
    with FakeMessagesAPI() as api:
        model = AnthropicModel(api_key="test-key", base_url=api.base_url, server_compaction={})
        api.script(StreamBuilder().text("ok").done())
        chunks = await drain(model, a_request())
        assert chunks[-1].text == "ok"
        assert "compact-2026-01-12" in api.requests[0].headers["anthropic-beta"]
    traced = anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9/traced")
    assert (traced._tracer is None) == (anthropic_http.poster(traced) is not None)


async def test_a_server_that_never_answers_times_out_as_the_sdk_says(transport):
    """A read timeout is the SDK's APITimeoutError (retried by the provider, then given up)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                accepted.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:

        async def no_sleep(seconds: float) -> None:
            pass

        host, port = listener.getsockname()
        model = AnthropicModel(
            api_key="test-key", base_url=f"http://{host}:{port}", timeout=0.2, max_retries=1, sleep=no_sleep
        )
        with pytest.raises(ModelError) as raised:
            await drain(model, a_request())
        assert raised.value.retryable and "gave up after 2 attempts" in str(raised.value)
        assert isinstance(raised.value.__cause__, anthropic.APITimeoutError)
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


async def chunks_of(*parts: bytes):
    for part in parts:
        await asyncio.sleep(0)
        yield part


async def decoded(*parts: bytes) -> list[tuple[bytes, Any]]:
    return [
        (name, json.loads(data)) async for name, data in anthropic_http.events(anthropic_http.reader(chunks_of(*parts)))
    ]


@pytest.mark.parametrize(
    "parts",
    [
        [b'event: a\ndata: {"x": 1}\n\nevent: b\ndata: {"x": 2}\n\n'],
        [b'event: a\r\ndata: {"x": 1}\r\n\r\nevent: b\r\ndata: {"x": 2}\r\n\r\n'],
        [b'event: a\rdata: {"x": 1}\r\revent: b\rdata: {"x": 2}\r\r'],
        # cut anywhere: in a line, between CR and LF, between an event's two newlines
        [b"event: a\r", b'\ndata: {"x"', b": 1}\r\n\r", b"\nevent:b\n", b'data:{"x": 2}\n', b"\n"],
        [b"ev", b"ent: a\ndata: ", b'{"x": 1}\n', b"\n", b'event: b\ndata: {"x": 2}\n\n'],
        # comments, pings, an event with no data, an unknown field, blank lines between events
        [
            b': hello\n\nevent: ping\ndata: {}\n\nevent: a\nid: 7\nretry: 5\n: note\ndata: {"x": 1}\n\n',
            b'\n\nevent: empty\n\nevent: \ndata: {"x": 0}\n\nevent: ping\ndata: \n\nevent: a\ndata: \n\n',
            b'event: b\nfoo: bar\ndata: {"x": 2}\n\n',
        ],
    ],
)
async def test_server_sent_events_decode_as_the_sdk_reads_them(parts):
    assert await decoded(*parts) == [(b"a", {"x": 1}), (b"b", {"x": 2})]
    assert await decoded(*parts) == await sdk_decoded(*parts)


async def sdk_decoded(*parts: bytes) -> list[tuple[bytes, Any]]:
    """What the provider kept of the SDK's own decoder's events (before ``anthropic_http``)."""
    return [
        (sse.event.encode(), sse.json())
        async for sse in anthropic.AsyncStream.raw_events(_Response(list(parts)))
        if sse.data and sse.event is not None and sse.event != "ping"
    ]


async def test_data_lines_join_with_newlines_and_an_unfinished_event_is_dropped():
    parts = [b'event: a\ndata: {"x":\ndata: 1}\n\nevent: b\ndata: {"x": 2}']
    assert await decoded(*parts) == await sdk_decoded(*parts) == [(b"a", {"x": 1})]


class _Response:
    """What ``AsyncStream.raw_events`` reads of a response."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts

    def aiter_bytes(self):
        return chunks_of(*self.parts)


@pytest.mark.parametrize(
    "data",
    [
        b'{"x": 1}',
        b'{"x":\t[1, "\xc3\xa9", null]}',
        b'  {"x": 1}',
        b'{"x": 1}  ',
        b'"text"',
        b'{"x": 1} {"y": 2}',
        b'{"x": ',
        b"nope",
        b"",
    ],
)
async def test_an_events_data_reads_as_json_loads_reads_it(data, monkeypatch):
    """The provider's events are each one's data as ``json.loads`` reads it, or its error."""
    model = AnthropicModel(api_key="test-key")

    @contextlib.asynccontextmanager
    async def response(params):
        yield _Response([b"event: a\ndata: " + data + b"\n\nevent: b\ndata: 2\n\n"])

    monkeypatch.setattr(model, "_response", response)

    async def outcome(read):
        try:
            return "read", await read()
        except ValueError as exc:
            return "refused", type(exc), str(exc)

    async def loads():
        return [json.loads(d.decode()) for d in (data, b"2") if d]

    assert await outcome(lambda: _listed(model._events({}))) == await outcome(loads)


async def _listed(events):
    return [e async for e in events]


class _Streaming:
    """A Messages API server that answers one streamed call by hand: its events as chunks of
    their own, ``pause`` (a threading.Event) awaited after the first ``before`` of them."""

    def __init__(self, events: list[tuple[str, dict[str, Any]]], before: int, pause: threading.Event) -> None:
        self.events, self.before, self.pause = events, before, pause
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.listener.getsockname()
        return f"http://{host}:{port}"

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn, contextlib.suppress(OSError):  # (a client that timed out has gone)
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(65536)
            head, _, body = received.partition(b"\r\n\r\n")
            length = int(
                next(
                    v for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
                )
            )
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for i, (name, data) in enumerate(self.events):
                if i == self.before:
                    self.pause.wait(10)
                event = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                conn.sendall(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            conn.sendall(b"0\r\n\r\n")

    def close(self) -> None:
        self.pause.set()
        self.thread.join(5)
        self.listener.close()


async def test_a_delta_is_yielded_as_it_arrives(transport):
    """The first text delta comes out of the stream while the rest of the reply is still to come."""
    events = StreamBuilder().text("Hel", "lo").done().events
    first = next(i for i, (name, data) in enumerate(events) if data.get("delta", {}).get("type") == "text_delta")
    server = _Streaming(events, first + 1, threading.Event())
    try:
        model = AnthropicModel(api_key="test-key", base_url=server.base_url, max_retries=0)
        stream = model.stream(a_request())
        chunk = await asyncio.wait_for(stream.__anext__(), 5)
        assert chunk.text == "Hel" and not server.pause.is_set()
        server.pause.set()
        rest = [c async for c in stream]
        assert [c.text for c in rest] == ["lo", "Hello"] and isinstance(rest[-1], ModelReply)
    finally:
        server.close()


async def test_a_reply_that_stops_coming_times_out_as_the_sdk_says(transport):
    """A body that stalls after its first event is the SDK's read timeout (a retryable error)."""
    server = _Streaming(StreamBuilder().text("x").done().events, 1, threading.Event())
    try:
        model = AnthropicModel(api_key="test-key", base_url=server.base_url, timeout=0.3, max_retries=0)
        with pytest.raises(ModelError) as raised:
            await drain(model, a_request())
        assert raised.value.retryable and isinstance(raised.value.__cause__, httpx2.TimeoutException)
    finally:
        server.close()
