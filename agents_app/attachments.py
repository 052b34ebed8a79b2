"""Attachments' bytes and what they are: the type sniffed from the first bytes, a PDF's page
count, and the one function that reads a stored file back (the Anthropic provider per model
call, a tool through ``ctx.attachments``).

The files live in Django's default storage (``STORAGES["default"]``: local files under
``MEDIA_ROOT`` by default, any django-storages backend in production) under a name made from
the attachment's id alone, so reading one needs no database query: ``read(id)``. The rows
(``models.Attachment``) say who uploaded it, for which session, and which turn used it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.core.files.storage import default_storage

#: the types June accepts, by their first bytes (the name and the declared type are not trusted)
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
PDF_TYPE = "application/pdf"
ID_RE = re.compile(r"[0-9a-f]{32}")
FOLDER = "june/attachments"
NAME_MAX = 120
_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def sniff(head: bytes) -> str | None:
    """The media type of a file from its first bytes (16 are enough), or None if June does not
    take it: PNG, JPEG, GIF, WebP, PDF."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"%PDF-"):
        return PDF_TYPE
    return None


def pdf_pages(data: bytes) -> int | None:
    """A PDF's page count, best effort: its ``/Type /Page`` objects (not ``/Pages``). None when
    none is found (compressed object streams hide them); the model reads the file itself."""
    return len(_PAGE.findall(data)) or None


def clean_name(name: str | None, content_type: str) -> str:
    """A display name safe to show and to send: the last path part, no control characters,
    at most ``NAME_MAX`` characters; a default from the type when nothing is left."""
    base = re.split(r"[\\/]", name or "")[-1]
    base = "".join(ch for ch in unicodedata.normalize("NFC", base) if unicodedata.category(ch)[0] != "C")
    base = base.strip().strip(".")[:NAME_MAX].strip()
    return base or "attachment." + ("pdf" if content_type == PDF_TYPE else content_type.split("/")[-1])


def storage_name(attachment_id: str) -> str:
    """Where an attachment's bytes are stored: from its id alone (``read`` needs no query)."""
    if not ID_RE.fullmatch(attachment_id or ""):
        raise ValueError(f"not an attachment id: {attachment_id!r}")
    return f"{FOLDER}/{attachment_id[:2]}/{attachment_id}"


def read(attachment_id: str) -> bytes | None:
    """The stored bytes of an attachment, or None when its file is gone (deleted with its
    session, or lost by the storage): callers say so instead of failing the turn."""
    try:
        with default_storage.open(storage_name(attachment_id), "rb") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def metadata(*, id: str, content_type: str, name: str, size: int, pages: int | None) -> dict[str, Any]:
    """The attachment as the transcript keeps it (never the bytes)."""
    return {"id": id, "type": content_type, "name": name, "size": size, "pages": pages}


def is_image(meta: dict[str, Any]) -> bool:
    return meta.get("type") in IMAGE_TYPES


def describe(meta: dict[str, Any]) -> str:
    """``report.pdf (application/pdf, 3 pages, 45,678 bytes)``: what the demo model says back."""
    parts = [str(meta.get("type"))]
    if meta.get("pages"):
        parts.append(f"{meta['pages']} page{'s' if meta['pages'] != 1 else ''}")
    parts.append(f"{int(meta.get('size') or 0):,} bytes")
    return f"{meta.get('name')} ({', '.join(parts)})"
