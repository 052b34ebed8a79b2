"""An MCP tool call's answer as the model's tool result: structured content where the server gave
it, else its text; images and other blocks described (the runtime's tool results are JSON);
``isError`` a model-readable error (``McpToolError``), as a Python tool's exception is."""

from __future__ import annotations

import json
from typing import Any

MAX_TEXT = 20_000


class McpToolError(Exception):
    """The server could not run the call (down, slow, an error result, a garbled answer)."""


def tool_result(result: Any) -> Any:
    blocks = list(getattr(result, "content", None) or [])
    text = "\n".join(b.text for b in blocks if getattr(b, "type", None) == "text" and isinstance(b.text, str))
    if getattr(result, "is_error", False):
        raise McpToolError((text or "the tool reported an error")[:MAX_TEXT])
    structured = getattr(result, "structured_content", None)
    others = [_describe(b) for b in blocks if getattr(b, "type", None) != "text"]
    if structured is None and text and len(blocks) == 1:
        structured = _json(text)  # a server that returns a dict as JSON text (the SDK's default)
    if structured is not None:
        out: dict[str, Any] = {"result": structured}
    else:
        out = {"text": text[:MAX_TEXT]}
    if others:
        out["content"] = others
    return out


def _json(text: str) -> Any:
    if not text.lstrip().startswith(("{", "[")) or len(text) > MAX_TEXT:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _describe(block: Any) -> dict[str, Any]:
    kind = getattr(block, "type", "unknown")
    if kind in ("image", "audio"):
        data = getattr(block, "data", "") or ""
        return {"type": kind, "mime_type": getattr(block, "mime_type", None), "base64_chars": len(data)}
    if kind == "resource_link":
        return {"type": kind, "uri": str(getattr(block, "uri", "")), "name": getattr(block, "name", None)}
    return {"type": kind}
