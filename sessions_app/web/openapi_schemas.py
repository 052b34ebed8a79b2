"""The OpenAPI document's components (``openapi.document`` merges them with the lists'): its
security schemes and the schemas its paths share (Error, Turn, Event …)."""

from __future__ import annotations

from typing import Any

from sessions_app.web.openapi_parts import (
    EVENT_TYPES,
    SAFE_STRING,
)


def components() -> dict[str, Any]:
    return {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "A per-user token: `python manage.py june token <username>` or the admin",
            },
            "session": {
                "type": "apiKey",
                "in": "cookie",
                "name": "sessionid",
                "description": "The Django login; unsafe methods need the X-CSRFToken header",
            },
        },
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {
                                "type": "string",
                                "examples": ["bad_request", "forbidden", "conflict", "rate_limited"],
                            },
                            "message": {"type": "string"},
                            "retry_after": {
                                "type": "integer",
                                "description": "429 only: seconds until a retry may pass",
                            },
                            "limit": {"type": "string", "description": "429 only: the setting of the limit reached"},
                        },
                    }
                },
            },
            "Turn": {
                "type": "object",
                "required": ["turn_id", "status", "text"],
                "properties": {
                    "turn_id": {"type": "string"},
                    "agent": {"type": "string"},
                    "session": {"type": "string"},
                    "status": {
                        "type": "string",
                        "enum": ["queued", "running", "suspended", "completed", "failed", "cancelled"],
                    },
                    "text": {"type": "string", "description": "The final assistant text"},
                    "error": {"type": ["object", "null"]},
                    "pending": {"oneOf": [{"$ref": "#/components/schemas/InputRequest"}, {"type": "null"}]},
                    "pending_requests": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/InputRequest"},
                        "description": "Every request the parked turn waits on (several when one "
                        "model step's parallel tool calls each need approval; answer them in any "
                        "order, the turn resumes after the last); `pending` is the first",
                    },
                    "cancel_reason": {"type": ["string", "null"], "enum": ["requested", "replaced", "reset", None]},
                    "usage": {
                        "type": "object",
                        "description": "What the turn's own model calls spent (token counts, "
                        "model_calls); `limited`: the limit its answer was given at; `children`: its subagents' "
                        "trees, summed; `served_by`: who answered its model calls (`<provider>:<model>`, each once); "
                        "`batch_input_tokens`, `batch_output_tokens`, …: the part of the counts answered through "
                        "the Message Batches API, priced at the batch price (`anthropic-batch:<model>`)",
                        "properties": {
                            "limited": {"type": "string"},
                            "served_by": {"type": "array", "items": {"type": "string"}},
                            "children": {"type": "object", "additionalProperties": {"type": "integer"}},
                        },
                        "additionalProperties": {"type": ["integer", "string", "object", "array"]},
                    },
                    "generation": {"type": "integer"},
                    "created_at": {"type": "string", "format": "date-time", "description": "When it was queued"},
                    "started_at": {
                        "type": ["string", "null"],
                        "format": "date-time",
                        "description": "When a worker first claimed it (null while queued)",
                    },
                    "ended_at": {
                        "type": ["string", "null"],
                        "format": "date-time",
                        "description": "When it completed, failed or was cancelled (null until then)",
                    },
                },
            },
            "JsonValue": {
                "description": "Any JSON value, at most 64 arrays/objects deep; no string (key or value) with NUL "
                "or an unpaired surrogate; no number beyond a double's range",
                "anyOf": [
                    {"type": ["null", "boolean", "number"]},
                    SAFE_STRING,
                    {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
                    {
                        "type": "object",
                        "propertyNames": SAFE_STRING,
                        "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
                    },
                ],
            },
            "ServerSentEvent": {
                "description": "One event of a stream. Committed events carry `id` (the session's event sequence "
                "number); live deltas (`message.delta`, `reasoning.delta`) carry none (a client "
                "keeps the last id it saw). The stream opens with `retry: 2000`; comment lines "
                "(`: keep-alive`, `: timeout`) come while idle and when a time bound ends it.",
                "type": "object",
                "required": ["data", "event"],
                "properties": {
                    "event": {"type": "string", "enum": EVENT_TYPES},
                    "id": {"type": "string", "pattern": "^[0-9]+$"},
                    "retry": {"type": "integer"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": "#/components/schemas/Event"},
                    },
                },
            },
            "InputRequest": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "prompt": {"type": "string"},
                    "schema": {"type": "object"},
                    "answerers": {"type": ["object", "null"]},
                },
            },
            "Event": {
                "type": "object",
                "required": ["type", "turn_id"],
                "properties": {"type": {"type": "string", "enum": EVENT_TYPES}, "turn_id": {"type": "string"}},
                "additionalProperties": True,
            },
        },
    }
