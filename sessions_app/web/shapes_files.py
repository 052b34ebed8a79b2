"""Attachments over HTTP: upload one file, download or remove it, the caller's unsent uploads —
their shapes and their rows of the route table (the views: ``files``, ``uploads``; the limits:
JUNE_ATTACHMENT_MAX_BYTES, JUNE_ATTACHMENTS_PER_MESSAGE)."""

from __future__ import annotations

from typing import Annotated, Any

from django.conf import settings
from pydantic import BaseModel, Field, WithJsonSchema
from typing_extensions import TypedDict

from agents_app import attachments as files
from sessions_app.web.apispec import Op, Reply, refusal, returns
from sessions_app.web.inputs import BODY, QUERY
from sessions_app.web.shapes_common import SESSION_PATH, AttachmentId, DateTime, SessionPath

TYPES = "PNG, JPEG, GIF, WebP or PDF"
FOUR_XX = ("400", "401", "403", "404", "405")


def limits() -> str:
    return (
        f"A file is at most {settings.JUNE_ATTACHMENT_MAX_BYTES:,} bytes (JUNE_ATTACHMENT_MAX_BYTES: 413) and "
        f"must be a {TYPES} by its bytes (415); a message carries at most "
        f"{settings.JUNE_ATTACHMENTS_PER_MESSAGE} (JUNE_ATTACHMENTS_PER_MESSAGE: 413)."
    )


class Attachment(TypedDict):
    """An upload's metadata."""

    id: AttachmentId
    type: Annotated[
        str,
        WithJsonSchema({"type": "string", "enum": [*files.IMAGE_TYPES, files.PDF_TYPE]}),
        Field(description="Sniffed from the first bytes; the name and the declared type are not trusted"),
    ]
    name: Annotated[str, Field(description="The file's name, cleaned (no path, no control characters)")]
    size: Annotated[int, Field(ge=0)]
    pages: Annotated[int | None, Field(description="A PDF's page count (best effort), else null")]


class UnsentAttachment(Attachment):
    agent: str
    session: Annotated[str, Field(description="The session key it was uploaded to")]
    created_at: DateTime


class UnsentList(TypedDict):
    attachments: list[UnsentAttachment]


class Removed(TypedDict):
    removed: Annotated[int, Field(ge=0)]


Binary = Annotated[Any, WithJsonSchema({"type": "string", "contentMediaType": "application/octet-stream"})]


class Upload(BaseModel):
    """One file, in the multipart field `file`."""

    model_config = BODY
    file: Binary


class AttachmentPath(SessionPath):
    model_config = QUERY
    attachment_id: Annotated[str, Field(description="An upload's id")]


OPERATIONS = [
    Op(
        "get",
        "/api/attachments/unsent",
        "listUnsentAttachments",
        "Your uploads no message has taken yet, every session, newest first",
        "What the cap on unsent uploads counts (a further upload over it is a 413); "
        "remove one with `DELETE …/attachments/{attachment_id}`, all of them with DELETE here. The "
        "sweeper deletes those older than JUNE_UNSENT_ATTACHMENT_HOURS.",
        responses={"200": returns("The unsent uploads", UnsentList)},
        errors=("400", "401", "403", "405"),
    ),
    Op(
        "delete",
        "/api/attachments/unsent",
        "removeUnsentAttachments",
        "Remove all your unsent uploads (sent ones stay with their messages)",
        responses={"200": returns("How many were removed", Removed)},
        errors=("400", "401", "403", "405"),
    ),
    Op(
        "post",
        f"{SESSION_PATH}/attachments",
        "uploadAttachment",
        "Upload a file to attach to a message",
        lambda: (
            "One file in the multipart field `file`. Send its `id` in `attachments` of "
            "`POST …/turns` (or the chat's start frame). " + limits()
        ),
        body={"multipart/form-data": Upload},
        responses={
            "201": returns("Stored", Attachment),
            "413": refusal(lambda: "Over the size or count limit: " + limits()),
            "415": refusal(f"Not a {TYPES} file (by its bytes)"),
        },
        errors=FOUR_XX,
    ),
    Op(
        "get",
        f"{SESSION_PATH}/attachments/{{attachment_id}}",
        "downloadAttachment",
        "Download an attachment (its uploader only)",
        "Images inline, PDFs as a download; someone else's attachment is a 404.",
        path_params=AttachmentPath,
        responses={"200": Reply("The file", dict.fromkeys((*files.IMAGE_TYPES, files.PDF_TYPE), str))},
        errors=FOUR_XX,
    ),
    Op(
        "delete",
        f"{SESSION_PATH}/attachments/{{attachment_id}}",
        "removeAttachment",
        "Remove an unsent upload",
        path_params=AttachmentPath,
        responses={"204": Reply("Removed")},
        errors=(*FOUR_XX, "409"),
    ),
]
