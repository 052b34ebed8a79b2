"""A local HTTP server that speaks Anthropic's Message Batches API, for the real SDK's
``client.messages.batches`` (``create``, ``retrieve``, ``list`` by pages, ``results``, ``cancel``).

A real socket server (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, port 0, a daemon thread): the
site's poller, in the test process or in a django-q2 worker, reaches it through
``ANTHROPIC_BASE_URL``. A batch stays ``in_progress`` until the test ends it (``end``) or, with
``ends_after``, that many seconds after its creation; its results (JSONL) are decided per request
by ``outcome(custom_id, params)``: ``("succeeded", message)``, ``("errored", message text)``,
``("expired", None)``. The default answers each request with ``answer: <its last user text>``.

``hold("create")`` / ``hold("results")`` make the next such request wait after the server has
done its part (the batch recorded; the results read) and before the answer is written:
``reached(name)`` says a client is there, so a test can SIGKILL it at that point; ``release``
lets it go on. ``created`` lists every batch created, with its requests: what a test counts.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Outcome = tuple[str, Any]


def message_for(
    params: dict[str, Any], text: str, *, input_tokens: int = 100, output_tokens: int = 20
) -> dict[str, Any]:
    return {
        "id": "msg_batched",
        "type": "message",
        "role": "assistant",
        "model": params.get("model", "claude-sonnet-4-6"),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def last_user_text(params: dict[str, Any]) -> str:
    for message in reversed(params.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            texts = [b.get("text", "") for b in content or [] if b.get("type") == "text"]
            if texts:
                return texts[-1]
    return ""


def echo(custom_id: str, params: dict[str, Any]) -> Outcome:
    return "succeeded", message_for(params, f"answer: {last_user_text(params)}")


@dataclass
class Batch:
    id: str
    created_at: float
    requests: list[dict[str, Any]]
    ended_at: float | None = None
    canceled: bool = False


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@dataclass
class FakeBatchesAPI:
    outcome: Callable[[str, dict[str, Any]], Outcome] = echo
    ends_after: float | None = None
    created: list[Batch] = field(default_factory=list)
    retrieved: int = 0
    listed: int = 0
    #: results files served (a kept answer is not read twice)
    results_read: int = 0
    #: the batches a client cancelled (``POST …/cancel``)
    cancelled: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._holds: dict[str, threading.Event] = {}
        self._reached: dict[str, threading.Event] = {}
        self._server: ThreadingHTTPServer | None = None

    # -- the test's side ---------------------------------------------------------------------------

    def start(self) -> str:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_POST(self) -> None:
                api._post(self)

            def do_GET(self) -> None:
                api._get(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        for event in self._holds.values():
            event.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def end(self, batch_id: str | None = None) -> None:
        """End one batch (or every batch): its results are ready."""
        with self._lock:
            for b in self.created:
                if (batch_id is None or b.id == batch_id) and b.ended_at is None:
                    b.ended_at = time.time()

    def hold(self, name: str) -> None:
        self._holds[name] = threading.Event()
        self._reached[name] = threading.Event()

    def reached(self, name: str, timeout: float = 30.0) -> bool:
        return self._reached[name].wait(timeout)

    def release(self, name: str) -> None:
        self._holds.pop(name).set()

    def custom_ids(self) -> list[str]:
        return [r["custom_id"] for b in self.created for r in b.requests]

    # -- the API -----------------------------------------------------------------------------------

    def _ended(self, b: Batch) -> bool:
        if b.ended_at is None and self.ends_after is not None and time.time() >= b.created_at + self.ends_after:
            b.ended_at = b.created_at + self.ends_after
        return b.ended_at is not None

    def _outcome(self, b: Batch, r: dict[str, Any]) -> Outcome:
        return ("canceled", None) if b.canceled else self.outcome(r["custom_id"], r["params"])

    def _json(self, b: Batch) -> dict[str, Any]:
        ended = self._ended(b)
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        for r in b.requests:
            kind = self._outcome(b, r)[0] if ended else "processing"
            counts[kind] += 1
        return {
            "id": b.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": counts,
            "created_at": _iso(b.created_at),
            "expires_at": _iso(b.created_at + timedelta(hours=24).total_seconds()),
            "ended_at": _iso(b.ended_at),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{b.id}/results" if ended else None,
        }

    def _wait(self, name: str) -> None:
        hold = self._holds.get(name)
        if hold is not None:
            self._reached[name].set()
            hold.wait()

    def _send(self, handler: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "application/json") -> None:
        try:
            handler.send_response(status)
            handler.send_header("content-type", ctype)
            handler.send_header("content-length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:  # the client is gone (killed while held)
            pass

    def _error(self, handler: BaseHTTPRequestHandler, status: int, message: str) -> None:
        body = {"type": "error", "error": {"type": "not_found_error", "message": message}}
        self._send(handler, status, json.dumps(body).encode())

    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("content-length") or 0))
        cancel = re.fullmatch(r"/v1/messages/batches/([^/]+)/cancel", handler.path.split("?")[0])
        if cancel:
            return self._cancel(handler, cancel.group(1))
        if handler.path.split("?")[0] != "/v1/messages/batches":
            return self._error(handler, 404, f"no route {handler.path}")
        requests = json.loads(raw)["requests"]
        with self._lock:
            b = Batch(id=f"msgbatch_{len(self.created) + 1:04d}", created_at=time.time(), requests=requests)
            self.created.append(b)
            body = self._json(b)
        self._wait("create")
        self._send(handler, 200, json.dumps(body).encode())

    def _cancel(self, handler: BaseHTTPRequestHandler, batch_id: str) -> None:
        """``POST …/{id}/cancel``: the batch ends at once, each request ``canceled``."""
        with self._lock:
            b = next((x for x in self.created if x.id == batch_id), None)
            if b is None:
                return self._error(handler, 404, f"no batch {batch_id}")
            if not self._ended(b):
                b.ended_at, b.canceled = time.time(), True
            self.cancelled.append(batch_id)
            body = self._json(b)
        self._send(handler, 200, json.dumps(body).encode())

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        path, _, query = handler.path.partition("?")
        if path == "/v1/messages/batches":  # newest first, a page of ``limit`` after ``after_id``
            limit = int((re.search(r"limit=(\d+)", query) or [0, "20"])[1])
            after = (re.search(r"after_id=([^&]+)", query) or [0, ""])[1]
            with self._lock:
                self.listed += 1
                newest = list(reversed(self.created))
                start = next((i + 1 for i, b in enumerate(newest) if b.id == after), 0) if after else 0
                page = [self._json(b) for b in newest[start : start + limit]]
                more = start + limit < len(newest)
            first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
            body = {"data": page, "has_more": more, "first_id": first, "last_id": last}
            return self._send(handler, 200, json.dumps(body).encode())
        found = re.fullmatch(r"/v1/messages/batches/([^/]+)(/results)?", path)
        b = next((x for x in self.created if found and x.id == found.group(1)), None)
        if b is None:
            return self._error(handler, 404, f"no batch at {path}")
        if not found or not found.group(2):
            with self._lock:
                self.retrieved += 1
                body = self._json(b)
            return self._send(handler, 200, json.dumps(body).encode())
        if not self._ended(b):
            return self._error(handler, 404, "the batch has not ended")
        lines = []
        for r in b.requests:
            kind, value = self._outcome(b, r)
            if kind == "succeeded":
                result: dict[str, Any] = {"type": kind, "message": value}
            elif kind == "errored":
                result = {"type": kind, "error": {"type": "error", "error": {"type": "api_error", "message": value}}}
            else:
                result = {"type": kind}
            lines.append(json.dumps({"custom_id": r["custom_id"], "result": result}))
        self._wait("results")
        with self._lock:
            self.results_read += 1
        self._send(handler, 200, "".join(line + "\n" for line in lines).encode(), "application/binary")
