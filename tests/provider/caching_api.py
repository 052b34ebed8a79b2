"""A local Messages API peer that applies the API's prompt-caching rules and answers by itself.

Unlike ``fake_messages_api`` (scripted replies), this peer answers every request with what its
``respond`` callable returns and reports the usage the real API would, so a conversation through
the real SDK shows what its ``cache_control`` marks earn (``bench/bench_caching.py``, and the
provider tests). The rules it applies (Anthropic's prompt caching documentation):

- the prefix is the tools, then the system prompt, then the messages' content blocks, in order;
  a block marked ``cache_control`` is a breakpoint; more than 4 is a 400 ("A maximum of 4 blocks
  with cache_control may be provided. Found N."), so is a 1-hour mark after a 5-minute one;
- a request reads the longest live entry found at a breakpoint or up to 20 blocks before it
  (the API's lookback); a read refreshes the entry's TTL;
- it writes an entry at each breakpoint past what it read whose prefix reaches ``min_tokens``
  (below it nothing is cached and no error is raised: both counters read 0), for 5 minutes or,
  with ``"ttl": "1h"``, an hour;
- usage: ``cache_read_input_tokens`` (the prefix read), ``cache_creation_input_tokens`` (from
  there to the last breakpoint written, split by TTL in ``cache_creation``), ``input_tokens``
  (the rest), in ``message_start`` and again, cumulative, in ``message_delta``.

Tokens are counted as characters / 4 of each block's JSON (the peer's own tokenizer: higher than
the provider's estimate, which counts the text only). Time is ``clock()``: a test or the
benchmark passes a simulated one.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}

#: ``respond(body) -> content blocks`` (``text`` and ``tool_use`` blocks, complete)
Respond = Callable[[dict[str, Any]], list[dict[str, Any]]]


def tokens(unit: dict[str, Any]) -> int:
    """The peer's token count of one prefix unit (a tool, a system block, a content block)."""
    bare = {k: v for k, v in unit.items() if k != "cache_control"}
    return max(1, math.ceil(len(json.dumps(bare, sort_keys=True, ensure_ascii=False)) / 4))


def units(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The request's prefix, one (where, unit) per cacheable block, in the API's order."""
    out: list[tuple[str, dict[str, Any]]] = [("tools", t) for t in body.get("tools") or ()]
    system = body.get("system")
    if isinstance(system, str) and system:
        out.append(("system", {"type": "text", "text": system}))
    elif isinstance(system, list):
        out += [("system", b) for b in system]
    for message in body.get("messages") or ():
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [(message["role"], b) for b in blocks]
    return out


class CacheError(Exception):
    """A request the API would refuse (400 invalid_request_error)."""


@dataclass
class Usage:
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.ephemeral_5m_input_tokens,
                "ephemeral_1h_input_tokens": self.ephemeral_1h_input_tokens,
            },
        }


@dataclass
class PromptCacheRules:
    """The cache itself: entries by (model, prefix hash), each with its expiry and TTL."""

    min_tokens: int
    clock: Callable[[], float] = time.monotonic
    entries: dict[str, tuple[float, str]] = field(default_factory=dict)

    def apply(self, body: dict[str, Any]) -> Usage:
        """The usage of ``body``, reading and writing the cache as the API does."""
        prefix = units(body)
        marks = [i for i, (_, u) in enumerate(prefix) if "cache_control" in u]
        if len(marks) > MAX_BREAKPOINTS:
            raise CacheError(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(marks)}."
            )
        ttls = [prefix[i][1]["cache_control"].get("ttl", "5m") for i in marks]
        if any(a == "5m" and b == "1h" for a, b in zip(ttls, ttls[1:])):
            raise CacheError("a ttl='1h' cache_control block must not come after a ttl='5m' one")
        keys: list[str] = []
        sizes: list[int] = []
        digest = hashlib.sha256(str(body.get("model")).encode())
        total = 0
        for where, unit in prefix:
            bare = {k: v for k, v in unit.items() if k != "cache_control"}
            digest.update(json.dumps([where, bare], sort_keys=True).encode())
            keys.append(digest.hexdigest())
            total += tokens(unit)
            sizes.append(total)  # tokens of the prefix up to and including this unit
        now = self.clock()
        hit = -1
        for mark in marks:
            for i in range(mark, max(mark - LOOKBACK_BLOCKS, -1), -1):
                entry = self.entries.get(keys[i])
                if entry is not None and entry[0] > now:
                    hit = max(hit, i)
                    break
        if hit >= 0:  # a read refreshes the entry
            self.entries[keys[hit]] = (now + TTL_SECONDS[self.entries[keys[hit]][1]], self.entries[keys[hit]][1])
        read = sizes[hit] if hit >= 0 else 0
        written = {"5m": 0, "1h": 0}
        last = hit
        for mark, ttl in zip(marks, ttls):
            if mark <= hit or sizes[mark] < self.min_tokens:
                continue
            self.entries[keys[mark]] = (now + TTL_SECONDS[ttl], ttl)
            written[ttl] += sizes[mark] - (sizes[last] if last >= 0 else 0)
            last = mark
        creation = written["5m"] + written["1h"]
        return Usage(
            input_tokens=total - read - creation,
            cache_creation_input_tokens=creation,
            cache_read_input_tokens=read,
            ephemeral_5m_input_tokens=written["5m"],
            ephemeral_1h_input_tokens=written["1h"],
        )


def _text_reply(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": "ok"}]


class CachingMessagesAPI:
    """``with CachingMessagesAPI(min_tokens=1024) as api: ...; api.usages``"""

    def __init__(
        self, *, min_tokens: int, respond: Respond = _text_reply, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rules = PromptCacheRules(min_tokens=min_tokens, clock=clock)
        self.respond = respond
        self.bodies: list[dict[str, Any]] = []
        self.usages: list[Usage] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> CachingMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def answer(self, body: dict[str, Any]) -> tuple[Usage, list[dict[str, Any]]]:
        with self._lock:  # one request at a time: the cache is shared state
            self.bodies.append(body)
            usage = self.rules.apply(body)
            self.usages.append(usage)
        return usage, self.respond(body)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes, like SSE

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    usage, content = api.answer(json.loads(raw))
                except CacheError as exc:
                    payload = json.dumps(
                        {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}}
                    ).encode()
                    self.send_response(400)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for name, data in events(usage, content):
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

        return Handler


def events(usage: Usage, content: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The streamed events of one reply carrying ``usage``."""
    start_usage = {**usage.to_json(), "output_tokens": 1}
    out: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_cache",
                    "type": "message",
                    "role": "assistant",
                    "model": "peer",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    ]
    output = 0
    for i, block in enumerate(content):
        if block["type"] == "text":
            start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        output += tokens(block)
        out.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}))
        out += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    delta_usage = {k: v for k, v in usage.to_json().items() if k != "cache_creation"}
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {**delta_usage, "output_tokens": output},
            },
        )
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return out
