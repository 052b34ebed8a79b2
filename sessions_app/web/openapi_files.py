"""The attachments' part of the OpenAPI document (``openapi.document`` merges it): the upload
and download routes, and what ``POST …/turns`` accepts besides JSON (text and files, multipart).
The routes: ``files``; the limits: JUNE_ATTACHMENT_MAX_BYTES, JUNE_ATTACHMENTS_PER_MESSAGE."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agents_app import attachments as files
from sessions_app.web.openapi_parts import ERROR, SESSION_PATH, errors, session_params

ID = {"type": "string", "pattern": f"^{files.ID_RE.pattern}$"}
TYPES = "PNG, JPEG, GIF, WebP or PDF"

ATTACHMENT = {
    "type": "object",
    "required": ["id", "type", "name", "size", "pages"],
    "properties": {
        "id": ID,
        "type": {
            "type": "string",
            "enum": [*files.IMAGE_TYPES, files.PDF_TYPE],
            "description": "Sniffed from the first bytes; the name and the declared type are not trusted",
        },
        "name": {"type": "string", "description": "The file's name, cleaned (no path, no control characters)"},
        "size": {"type": "integer", "minimum": 0},
        "pages": {"type": ["integer", "null"], "description": "A PDF's page count (best effort), else null"},
    },
}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


def _limits() -> str:
    return (
        f"A file is at most {settings.JUNE_ATTACHMENT_MAX_BYTES:,} bytes (JUNE_ATTACHMENT_MAX_BYTES: 413) and "
        f"must be a {TYPES} by its bytes (415); a message carries at most "
        f"{settings.JUNE_ATTACHMENTS_PER_MESSAGE} (JUNE_ATTACHMENTS_PER_MESSAGE: 413)."
    )


def ids_schema() -> dict[str, Any]:
    """``attachments`` of a JSON start: ids from ``POST …/attachments``."""
    return {
        "type": "array",
        "items": ID,
        "uniqueItems": True,
        "maxItems": settings.JUNE_ATTACHMENTS_PER_MESSAGE,
        "description": "Ids of your unsent uploads to this session (404: not yours; 409: already sent). "
        "With attachments, `text` may be empty.",
    }


def turn_form_schema(text: dict[str, Any]) -> dict[str, Any]:
    """``POST …/turns`` as multipart: the text and the files in one request."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["file"],
        "properties": {
            "text": {
                **text,
                "minLength": 0,
                "pattern": "^[^\\x00]*$",
                "description": text.get("description", "") + "; may be empty (or absent) with files",
            },
            "replace": {"type": "string", "enum": ["true", "false", "1", "0"]},
            "file": {
                "type": "array",
                "minItems": 1,
                "maxItems": settings.JUNE_ATTACHMENTS_PER_MESSAGE,
                "items": {"type": "string", "contentMediaType": "application/octet-stream"},
            },
        },
    }


def attachment_paths() -> dict[str, Any]:
    session_path, params = SESSION_PATH, session_params()
    too_big = _error("Over the size or count limit: " + _limits())
    unsent = {
        **ATTACHMENT,
        "required": [*ATTACHMENT["required"], "agent", "session", "created_at"],
        "properties": {
            **ATTACHMENT["properties"],
            "agent": {"type": "string"},
            "session": {"type": "string", "description": "The session key it was uploaded to"},
            "created_at": {"type": "string", "format": "date-time"},
        },
    }
    return {
        "/api/attachments/unsent": {
            "get": {
                "operationId": "listUnsentAttachments",
                "summary": "Your uploads no message has taken yet, every session, newest first",
                "description": "What the cap on unsent uploads counts (a further upload over it is a 413); "
                "remove one with `DELETE …/attachments/{attachment_id}`, all of them with DELETE here. The "
                "sweeper deletes those older than JUNE_UNSENT_ATTACHMENT_HOURS.",
                "responses": {
                    "200": {
                        "description": "The unsent uploads",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["attachments"],
                                    "properties": {"attachments": {"type": "array", "items": unsent}},
                                }
                            }
                        },
                    },
                    **errors("400", "401", "403", "405"),
                },
            },
            "delete": {
                "operationId": "removeUnsentAttachments",
                "summary": "Remove all your unsent uploads (sent ones stay with their messages)",
                "responses": {
                    "200": {
                        "description": "How many were removed",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["removed"],
                                    "properties": {"removed": {"type": "integer", "minimum": 0}},
                                }
                            }
                        },
                    },
                    **errors("400", "401", "403", "405"),
                },
            },
        },
        f"{session_path}/attachments": {
            "parameters": params,
            "post": {
                "operationId": "uploadAttachment",
                "summary": "Upload a file to attach to a message",
                "description": "One file in the multipart field `file`. Send its `id` in `attachments` of "
                "`POST …/turns` (or the chat's start frame). " + _limits(),
                "requestBody": {
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["file"],
                                "properties": {
                                    "file": {"type": "string", "contentMediaType": "application/octet-stream"}
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "201": {"description": "Stored", "content": {"application/json": {"schema": ATTACHMENT}}},
                    **errors("400", "401", "403", "404", "405"),
                    "413": too_big,
                    "415": _error(f"Not a {TYPES} file (by its bytes)"),
                },
            },
        },
        f"{session_path}/attachments/{{attachment_id}}": {
            "parameters": [
                *params,
                {
                    "name": "attachment_id",
                    "in": "path",
                    "required": True,
                    "description": "An upload's id",
                    "schema": {"type": "string"},
                },
            ],
            "get": {
                "operationId": "downloadAttachment",
                "summary": "Download an attachment (its uploader only)",
                "description": "Images inline, PDFs as a download; someone else's attachment is a 404.",
                "responses": {
                    "200": {
                        "description": "The file",
                        "content": {t: {"schema": {"type": "string"}} for t in (*files.IMAGE_TYPES, files.PDF_TYPE)},
                    },
                    **errors("400", "401", "403", "404", "405"),
                },
            },
            "delete": {
                "operationId": "removeAttachment",
                "summary": "Remove an unsent upload",
                "responses": {"204": {"description": "Removed"}, **errors("400", "401", "403", "404", "405", "409")},
            },
        },
    }
