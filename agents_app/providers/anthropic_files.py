"""A user message's attachments as Anthropic Messages API content blocks (``anthropic.py``
puts them before the message's text). Pure but for ``read``: the bytes come from the site's
storage (``agents_app.attachments.read``) at every model call, never from the transcript."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from agents_app.attachments import PDF_TYPE
from agents_app.runtime.messages import Message

#: an attachment's bytes by id; None when the file is gone
Reader = Callable[[str], "bytes | None"]


def attachment_block(meta: dict[str, Any], data: bytes | None) -> dict[str, Any]:
    """One attachment as an API content block: an ``image`` or a ``document`` (PDF) with its
    bytes in base64; a file that is gone is a text note, so the turn goes on without it."""
    if data is None:
        return {"type": "text", "text": f"[attachment {meta.get('name')} ({meta.get('type')}) is no longer available]"}
    source = {"type": "base64", "media_type": meta.get("type"), "data": base64.b64encode(data).decode("ascii")}
    if meta.get("type") == PDF_TYPE:
        return {"type": "document", "source": source, "title": str(meta.get("name") or "document")[:200]}
    return {"type": "image", "source": source}


def attachment_blocks(message: Message, read: Reader | None) -> list[dict[str, Any]]:
    """The blocks of ``message``'s attachments, in their order (none without a reader)."""
    if not message.attachments or read is None:
        return []
    return [attachment_block(a, read(str(a.get("id")))) for a in message.attachments]
