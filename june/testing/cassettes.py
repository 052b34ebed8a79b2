"""Cassettes: a real model's streamed replies recorded once, replayed in later runs.

A ``Cassette`` is a Model. Recording (``pytest --june-record``), it asks the agent's own provider
and writes each reply's stream (text and reasoning deltas, then the whole reply) to a JSON file,
keyed by the SHA-256 of the canonical request: the agent's model and settings, its instructions,
its tools, the messages (without the turn ids a run draws anew and the usage a reply reports).
Replaying, it answers a request from the file and calls no provider: no network, no key. A
request the file does not hold fails the turn with ``CassetteMismatch`` (a model error nobody
retries) whose message says what changed against the recording it was closest to — the
instructions, the tools, the messages — and the tester raises it in the test.

Nothing of the transport is recorded (no headers, no URL), and the provider's credentials
(``secrets()``) and the values of the site's secret-named settings are replaced by
``[redacted]`` wherever they would appear (a model that echoes a key).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from django.conf import settings

from agents_app.runtime import Agent, ModelError, ModelReply, ModelRequest, ReasoningDelta, StopReason, TextDelta
from agents_app.runtime.messages import ToolCall
from agents_app.runtime.model import ModelChunk
from agents_app.runtime.seams import Model

VERSION = 1
REDACTED = "[redacted]"
#: settings whose values are secrets wherever they would show up in a cassette
SECRET_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD)$")


class CassetteMismatch(ModelError):
    """The request is not in the cassette; ``diff`` says how it differs from the nearest one."""

    def __init__(self, message: str, diff: str = "") -> None:
        super().__init__(message + ("\n" + diff if diff else ""), retryable=False)
        self.diff = diff


def canonical(request: ModelRequest, model: dict[str, Any]) -> dict[str, Any]:
    """What identifies a request: everything the model is sent that a test's run controls."""
    messages = []
    for m in request.messages:
        data = m.to_json()
        data.pop("turn_id", None)  # drawn anew by every run
        data.pop("usage", None)  # what an earlier reply cost, not what this request asks
        data.pop("served_by", None)  # which model answered it: the reply's, not the request's
        messages.append(data)
    return {
        "model": model,
        "system": request.system,
        "tools": [t.to_json() for t in request.tools],
        "messages": messages,
        "purpose": request.purpose,
        "tools_allowed": request.tools_allowed,
    }


def key_of(request: dict[str, Any]) -> str:
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def chunk_json(chunk: ModelChunk) -> dict[str, Any]:
    if isinstance(chunk, TextDelta):
        return {"text": chunk.text}
    if isinstance(chunk, ReasoningDelta):
        return {"reasoning": chunk.text}
    return {
        "reply": {
            "text": chunk.text,
            "tool_calls": [c.to_json() for c in chunk.tool_calls],
            "blocks": list(chunk.blocks),
            "stop_reason": str(chunk.stop_reason),
            "usage": dict(chunk.usage),
            "served_by": chunk.served_by,
        }
    }


def chunk_of(data: dict[str, Any]) -> ModelChunk:
    if "text" in data:
        return TextDelta(data["text"])
    if "reasoning" in data:
        return ReasoningDelta(data["reasoning"])
    r = data["reply"]
    return ModelReply(
        text=r["text"],
        tool_calls=tuple(ToolCall.from_json(c) for c in r["tool_calls"]),
        blocks=tuple(r["blocks"]),
        stop_reason=StopReason(r["stop_reason"]),
        usage=dict(r["usage"]),
        served_by=str(r.get("served_by") or ""),
    )


def settings_secrets() -> list[str]:
    found = []
    for name in dir(settings):
        value = getattr(settings, name, None) if name.isupper() and SECRET_NAME.search(name) else None
        if isinstance(value, str) and len(value) >= 8:
            found.append(value)
    return found


def _lines(value: Any) -> list[str]:
    text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False)
    return text.splitlines()


def _udiff(label: str, old: Any, new: Any) -> list[str]:
    body = list(difflib.unified_diff(_lines(old), _lines(new), "recorded", "sent", n=1, lineterm=""))
    return [f"{label} changed:", *("  " + line for line in body[2:])]


def explain(recorded: dict[str, Any], sent: dict[str, Any]) -> str:
    """What differs between two canonical requests, part by part, in words and unified diffs."""
    out: list[str] = []
    if recorded.get("model") != sent.get("model"):
        out.append(f"model changed: {recorded.get('model')} -> {sent.get('model')}")
    if recorded.get("system") != sent.get("system"):
        out += _udiff("instructions", recorded.get("system", ""), sent.get("system", ""))
    old_tools = {t["name"]: t for t in recorded.get("tools", [])}
    new_tools = {t["name"]: t for t in sent.get("tools", [])}
    for name in sorted(new_tools.keys() - old_tools.keys()):
        out.append(f"tool added: {name}")
    for name in sorted(old_tools.keys() - new_tools.keys()):
        out.append(f"tool removed: {name}")
    for name in sorted(old_tools.keys() & new_tools.keys()):
        if old_tools[name] != new_tools[name]:
            out += _udiff(f"tool {name}", old_tools[name], new_tools[name])
    old_msgs, new_msgs = recorded.get("messages", []), sent.get("messages", [])
    for i in range(max(len(old_msgs), len(new_msgs))):
        old = old_msgs[i] if i < len(old_msgs) else None
        new = new_msgs[i] if i < len(new_msgs) else None
        if old == new:
            continue
        role = (new or old or {}).get("role")
        if old is None:
            out.append(f"message {i} ({role}) added: {json.dumps(new, ensure_ascii=False)[:300]}")
        elif new is None:
            out.append(f"message {i} ({role}) missing: {json.dumps(old, ensure_ascii=False)[:300]}")
        else:
            out += _udiff(f"message {i} ({role})", old, new)
    for part in ("purpose", "tools_allowed"):
        if recorded.get(part) != sent.get(part):
            out.append(f"{part} changed: {recorded.get(part)!r} -> {sent.get(part)!r}")
    return "\n".join(out)


class Cassette:
    """A Model that replays ``path`` (or, ``record=True``, records it from ``inner``)."""

    def __init__(self, path: str | Path, *, record: bool = False, inner: Model | None = None) -> None:
        self.path = Path(path)
        self.record = record
        self.inner = inner
        self.model: dict[str, Any] = {}
        self.requests: list[ModelRequest] = []
        self.mismatch: CassetteMismatch | None = None
        self.entries: list[dict[str, Any]] = []
        self._used: set[int] = set()
        if not record and self.path.exists():
            data = json.loads(self.path.read_text())
            self.entries = data["interactions"]

    def bind(self, agent: Agent, inner_for: Callable[[Agent], Model]) -> None:
        """The agent whose turns use it: the model its folder declares and its settings are part
        of each request's key (not the provider the environment picks: a replay has no key);
        recording, its own provider is the model asked."""
        config = {k: v for k, v in agent.model_config.items() if not SECRET_NAME.search(k.upper())}
        self.model = {"provider": agent.model, "config": config}
        if self.record and self.inner is None:
            self.inner = inner_for(agent)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        self.requests.append(request)
        sent = canonical(request, self.model)
        if self.record:
            async for chunk in self._recorded(request, sent):
                yield chunk
            return
        for chunk in self._replayed(sent):
            yield chunk

    def _replayed(self, sent: dict[str, Any]) -> list[ModelChunk]:
        key = key_of(sent)
        found = [i for i, e in enumerate(self.entries) if e["key"] == key]
        if not found:
            self.mismatch = self._miss(sent)
            raise self.mismatch
        unused = [i for i in found if i not in self._used]
        index = (unused or found)[0]  # a step a crash made run again is asked the same again
        self._used.add(index)
        return [chunk_of(c) for c in self.entries[index]["chunks"]]

    def _miss(self, sent: dict[str, Any]) -> CassetteMismatch:
        if not self.entries:
            return CassetteMismatch(f"no recording in {self.path}: run pytest with --june-record to record it")
        position = len(self._used)
        nearest = (
            self.entries[position]["request"]
            if position < len(self.entries)
            else max(
                (e["request"] for e in self.entries),
                key=lambda r: difflib.SequenceMatcher(None, json.dumps(r), json.dumps(sent)).ratio(),
            )
        )
        return CassetteMismatch(
            f"this request is not in {self.path} (re-record with --june-record if the change is meant):",
            explain(nearest, sent),
        )

    async def _recorded(self, request: ModelRequest, sent: dict[str, Any]) -> AsyncIterator[ModelChunk]:
        if self.inner is None:
            raise CassetteMismatch("recording needs a model to ask: bind the cassette to an agent")
        chunks: list[dict[str, Any]] = []
        async for chunk in self.inner.stream(request):
            chunks.append(chunk_json(chunk))
            yield chunk
        self.entries.append({"key": key_of(sent), "request": sent, "chunks": chunks})
        self._save()

    def _save(self) -> None:
        text = json.dumps({"version": VERSION, "interactions": self.entries}, indent=1, ensure_ascii=False)
        secrets = [*settings_secrets(), *(getattr(self.inner, "secrets", lambda: ())())]
        for secret in sorted(set(secrets), key=len, reverse=True):
            text = text.replace(json.dumps(secret)[1:-1], REDACTED)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(text + "\n")
