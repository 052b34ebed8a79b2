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
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


Scripted = Stream | HTTPError | Disconnect


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    raw: bytes  # the body as sent, for byte-level assertions


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
                scripted = api._next(Received(self.path, headers, body, raw))
                if self.path.split("?")[0] != "/v1/messages":
                    self._error(HTTPError(404, "not_found_error", f"fake: no route {self.path}"))
                elif scripted is None:
                    self._error(HTTPError(500, "api_error", "fake: no scripted response left"))
                elif isinstance(scripted, Disconnect):
                    self.close_connection = True
                elif isinstance(scripted, HTTPError):
                    self._error(scripted)
                else:
                    self._stream(scripted)

            def _error(self, err: HTTPError) -> None:
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

            def _stream(self, stream: Stream) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", "req_fake")
                self.end_headers()
                for name, data in stream.events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

        return Handler
