"""A local HTTP server that speaks the Anthropic Messages API's streaming format.

Tests script the responses it replays, in order, one per request, and read back every request
it received (path, headers, JSON body). It is a real socket server (stdlib
``ThreadingHTTPServer`` on 127.0.0.1, port 0, in a daemon thread), so the provider under test
goes through the official SDK and its HTTP client exactly as it would in production.

Scripted responses:

- :class:`Stream`: ``200 text/event-stream``, the given ``(event, data)`` pairs written as
  Server-Sent Events. :class:`StreamBuilder` composes the usual sequence
  (``message_start``, content blocks with their deltas, ``message_delta``, ``message_stop``)
  and can cut it short with an ``error`` event.
- :class:`HTTPError`: a non-streaming error with the API's JSON error body and headers.
- :class:`Disconnect`: the connection is closed without any response.

A request with nothing left to replay gets a 500 ``api_error`` naming the problem and is
counted in ``unscripted`` so a test can assert it never happened.

It also answers as Claude's other platforms do, on their paths, as the SDK's clients send and read
them: Vertex AI (``POST /projects/<p>/locations/<r>/publishers/anthropic/models/<model>:streamRawPredict``,
the same server-sent events) and AWS Bedrock (``POST /model/<model>/invoke-with-response-stream``,
each event a ``chunk`` of AWS's binary event stream, its JSON base64-encoded under ``bytes``;
errors as Bedrock's JSON ``{"message": …}`` with its ``x-amzn-errortype`` header). ``Received``
says which platform a request came on and the model its path named.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class Stream:
    events: list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class HTTPError:
    status: int
    type: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Disconnect:
    pass


@dataclass(frozen=True)
class Counted:
    """The answer to ``POST /v1/messages/count_tokens`` (Vertex: ``count-tokens:rawPredict``)."""

    input_tokens: int


Scripted = Stream | HTTPError | Disconnect | Counted


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    raw: bytes  # the body as sent, for byte-level assertions
    platform: str = "anthropic"  # anthropic | vertex | bedrock, by the path
    model: str = ""  # the body's, or the path's on Vertex and Bedrock


_VERTEX = re.compile(r"^/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/([^/:]+):streamRawPredict$")
_BEDROCK = re.compile(r"^/model/(.+)/invoke-with-response-stream$")
#: Bedrock's error types by status (its ``x-amzn-errortype``)
_BEDROCK_ERRORS = {400: "ValidationException", 403: "AccessDeniedException", 429: "ThrottlingException"}
#: the exception frames of Bedrock's response stream, for the API's ``error`` event types
_BEDROCK_STREAM_ERRORS = {
    "overloaded_error": "serviceUnavailableException",
    "rate_limit_error": "throttlingException",
    "api_error": "internalServerException",
    "invalid_request_error": "validationException",
}


def route(path: str, body: dict[str, Any]) -> tuple[str, str] | None:
    """(platform, model) of a request path the fake answers; None for another path."""
    bare = path.split("?")[0]
    if bare in ("/v1/messages", "/v1/messages/count_tokens"):
        return "anthropic", str(body.get("model", ""))
    if bare.endswith("/publishers/anthropic/models/count-tokens:rawPredict"):
        return "vertex", str(body.get("model", ""))
    if found := _VERTEX.match(bare):
        return "vertex", found.group(1)
    if found := _BEDROCK.match(bare):
        return "bedrock", unquote(found.group(1))
    return None


def event_stream_message(payload: bytes, headers: dict[str, str]) -> bytes:
    """One message of AWS's event stream encoding: a prelude (total and headers lengths, their
    CRC32), string headers, the payload, and the CRC32 of all before it."""
    encoded = b"".join(
        struct.pack("B", len(name)) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message))


def bedrock_chunk(event: dict[str, Any]) -> bytes:
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    return event_stream_message(
        payload, {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    )


class StreamBuilder:
    """Builds the event sequence of one streamed Messages API response.

    Each content-block method appends ``content_block_start``, its deltas and
    ``content_block_stop`` at the next index; ``done`` closes the message and ``error`` cuts
    it short the way the API does when it fails mid-stream.
    """

    def __init__(
        self,
        *,
        msg_id: str = "msg_fake",
        model: str = "claude-sonnet-4-6",
        input_tokens: int = 10,
        cache_creation_input_tokens: int | None = None,
        cache_read_input_tokens: int | None = None,
    ) -> None:
        usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
        if cache_creation_input_tokens is not None:
            usage["cache_creation_input_tokens"] = cache_creation_input_tokens
        if cache_read_input_tokens is not None:
            usage["cache_read_input_tokens"] = cache_read_input_tokens
        self.events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": usage,
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        self._index = 0

    def _block(self, start: dict[str, Any], deltas: list[dict[str, Any]]) -> StreamBuilder:
        i = self._index
        self._index += 1
        self.events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        for delta in deltas:
            self.events.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        self.events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        return self

    def text(self, *chunks: str) -> StreamBuilder:
        return self._block({"type": "text", "text": ""}, [{"type": "text_delta", "text": c} for c in chunks])

    def thinking(self, chunks: list[str], signature: str) -> StreamBuilder:
        deltas = [{"type": "thinking_delta", "thinking": c} for c in chunks]
        deltas.append({"type": "signature_delta", "signature": signature})
        return self._block({"type": "thinking", "thinking": "", "signature": ""}, deltas)

    def redacted_thinking(self, data: str) -> StreamBuilder:
        return self._block({"type": "redacted_thinking", "data": data}, [])

    def compaction(self, content: str | None, encrypted_content: str, signature: str | None = None) -> StreamBuilder:
        """A server-side compaction block (``compact_20260112``): its summary comes in one delta."""
        start = {"type": "compaction", "content": None, "encrypted_content": None}
        if signature is not None:
            start["signature"] = signature
        return self._block(
            start, [{"type": "compaction_delta", "content": content, "encrypted_content": encrypted_content}]
        )

    def tool_use(self, tool_id: str, name: str, partial_json: list[str]) -> StreamBuilder:
        return self._block(
            {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in partial_json],
        )

    def partial_text(self, *chunks: str) -> StreamBuilder:
        """Open a text block and stream ``chunks`` without closing it (for ``error``)."""
        i = self._index
        self._index += 1
        self.events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            )
        )
        for c in chunks:
            self.events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": c}},
                )
            )
        return self

    def done(self, stop_reason: str | None = "end_turn", *, output_tokens: int = 20, **usage: int) -> Stream:
        self.events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens, **usage},
                },
            )
        )
        self.events.append(("message_stop", {"type": "message_stop"}))
        return Stream(list(self.events))

    def error(self, type: str = "overloaded_error", message: str = "Overloaded") -> Stream:
        self.events.append(("error", {"type": "error", "error": {"type": type, "message": message}}))
        return Stream(list(self.events))

    def truncated(self) -> Stream:
        """The events so far, with no ``message_stop``: the connection just ends."""
        return Stream(list(self.events))


class FakeMessagesAPI:
    """``with FakeMessagesAPI() as api: api.script(...); ... api.requests``"""

    def __init__(self) -> None:
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self.requests: list[Received] = []
        self.unscripted = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, *responses: Scripted) -> None:
        with self._lock:
            self._script.extend(responses)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, received: Received) -> Scripted | None:
        with self._lock:
            self.requests.append(received)
            if self._script:
                return self._script.popleft()
            self.unscripted += 1
            return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: the body ends when the connection closes, as an SSE stream does
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                headers = {k.lower(): v for k, v in self.headers.items()}
                where = route(self.path, body)
                platform, model = where or ("", "")
                scripted = api._next(Received(self.path, headers, body, raw, platform, model))
                self.platform = platform
                if where is None:
                    self._error(HTTPError(404, "not_found_error", f"fake: no route {self.path}"))
                elif scripted is None:
                    self._error(HTTPError(500, "api_error", "fake: no scripted response left"))
                elif isinstance(scripted, Disconnect):
                    self.close_connection = True
                elif isinstance(scripted, HTTPError):
                    self._error(scripted)
                elif isinstance(scripted, Counted):
                    payload = json.dumps({"input_tokens": scripted.input_tokens}).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                else:
                    self._stream(scripted)

            def _error(self, err: HTTPError) -> None:
                if self.platform == "bedrock":
                    return self._bedrock_error(err)
                payload = json.dumps(
                    {"type": "error", "error": {"type": err.type, "message": err.message}, "request_id": "req_fake"}
                ).encode()
                self.send_response(err.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("request-id", "req_fake")
                for name, value in err.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def _bedrock_error(self, err: HTTPError) -> None:
                payload = json.dumps({"message": err.message}).encode()
                self.send_response(err.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("x-amzn-errortype", _BEDROCK_ERRORS.get(err.status, "InternalServerException"))
                for name, value in err.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, stream: Stream) -> None:
                if self.platform == "bedrock":
                    self.send_response(200)
                    self.send_header("content-type", "application/vnd.amazon.eventstream")
                    self.end_headers()
                    for name, data in stream.events:
                        if name == "error":  # a stream's error frame: an exception message of its own
                            kind = _BEDROCK_STREAM_ERRORS.get(
                                data.get("error", {}).get("type"), "modelStreamErrorException"
                            )
                            message = json.dumps({"message": data.get("error", {}).get("message", "")}).encode()
                            headers = {
                                ":exception-type": kind,
                                ":content-type": "application/json",
                                ":message-type": "exception",
                            }
                            self.wfile.write(event_stream_message(message, headers))
                        else:
                            self.wfile.write(bedrock_chunk(data))
                        self.wfile.flush()
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", "req_fake")
                self.end_headers()
                for name, data in stream.events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

        return Handler
