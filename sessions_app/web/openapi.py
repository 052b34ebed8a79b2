"""The OpenAPI 3.1 description of the HTTP API, served at /api/openapi.json.

Written by hand next to the routes (``api_urls``); a test checks that every route is described
with its path parameters and its JSON error responses.
"""

from __future__ import annotations

from typing import Any

from sessions_app import services
from sessions_app.web.links import mount
from sessions_app.web.openapi_branches import branch_paths
from sessions_app.web.openapi_files import attachment_paths, ids_schema, turn_form_schema
from sessions_app.web.openapi_frontends import frontend_paths
from sessions_app.web.openapi_lists import (  # noqa: F401 (SESSION_CURSOR, TURN_CURSOR: lists' patterns)
    SESSION_CURSOR,
    TURN_CURSOR,
    list_paths,
    list_schemas,
    merge_paths,
    search_paths,
)
from sessions_app.web.openapi_parts import (
    BOOL_QUERY,
    COMMON,
    NO_BODY,
    SEQ,
    SESSION_PATH,
    SSE,
    TURN_REF,
    anchored,
    body,
    errors,
    returns,
    session_params,
    text_schema,
    turn_params,
)
from sessions_app.web.openapi_schemas import components


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "June for Django HTTP API",
            "version": "1",
            "description": "Agent turns as durable processes: start turns, stream their events, answer "
            "parked requests, cancel, reset, edit and regenerate as branches. See docs/api.md.",
        },
        # the paths below are relative to June's mount: "/" at the root, "/assistant" under a prefix
        "servers": [{"url": mount().rstrip("/") or "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": merge_paths(
            paths(), list_paths(), search_paths(), attachment_paths(), branch_paths(), frontend_paths()
        ),
        "components": {**(c := components()), "schemas": {**c["schemas"], **list_schemas()}},
    }


def paths() -> dict[str, Any]:
    return {
        "/api/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "security": [],
                "responses": {"200": returns("The OpenAPI description", {"type": "object"})},
            },
        },
        f"{SESSION_PATH}/turns": {
            "parameters": session_params(),
            "post": {
                "operationId": "startTurn",
                "summary": "Start a turn",
                "description": "With `Accept: text/event-stream`: the turn's events as SSE until its terminal "
                "event (turn.completed, turn.failed, turn.cancelled or input.requested). "
                "Otherwise waits (bounded by JUNE_API_WAIT_SECONDS) and answers 200 with the "
                "ended turn, or 202 with the turn id if it has not ended; `?wait=false` "
                "answers 202 at once. `replace` cancels the session's unfinished turns first.",
                "parameters": [
                    {
                        "name": "wait",
                        "in": "query",
                        "description": "Boolean: 1/0, true/false, yes/no, on/off (default true)",
                        "schema": BOOL_QUERY,
                    },
                    {
                        "name": "replace",
                        "in": "query",
                        "description": "Boolean, as `wait` (default false)",
                        "schema": BOOL_QUERY,
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["text"],
                                "properties": {
                                    "text": text_schema(),
                                    "replace": {"type": "boolean", "default": False},
                                    "attachments": ids_schema(),
                                },
                            }
                        },
                        "multipart/form-data": {"schema": turn_form_schema(text_schema())},
                    },
                },
                "responses": {
                    "200": {
                        "description": "The turn ended (completed, failed, cancelled) or parked (suspended)",
                        "content": {"application/json": {"schema": TURN_REF}, **SSE},
                    },
                    "202": returns(
                        "Queued or still running",
                        {
                            "type": "object",
                            "required": ["turn_id", "status"],
                            "properties": {"turn_id": {"type": "string"}, "status": {"type": "string"}},
                        },
                    ),
                    **errors(*COMMON, "409", "413", "415", "429"),
                },
            },
        },
        f"{SESSION_PATH}/turns/{{turn_id}}": {
            "parameters": turn_params(),
            "get": {
                "operationId": "getTurn",
                "summary": "A turn: status, result, error, pending request, usage",
                "responses": {"200": returns("The turn", TURN_REF), **errors(*COMMON)},
            },
        },
        f"{SESSION_PATH}/turns/{{turn_id}}/resume": {
            "parameters": turn_params(),
            "post": {
                "operationId": "resumeTurn",
                "summary": "Answer the turn's parked request",
                "requestBody": body(
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["input_id", "answer"],
                        "properties": {
                            "input_id": {"type": "string", "pattern": anchored(services.INPUT_ID_RE)},
                            "answer": {
                                "$ref": "#/components/schemas/JsonValue",
                                "description": "Any JSON matching the request's schema",
                            },
                        },
                    }
                ),
                "responses": {
                    "200": returns(
                        "The turn ran on and ended, or (status suspended) still waits on another call of the same step",
                        TURN_REF,
                    ),
                    "202": returns("Accepted: the turn is queued again", TURN_REF),
                    **errors(*COMMON, "409", "413", "422", "500"),
                },
            },
        },
        f"{SESSION_PATH}/turns/{{turn_id}}/cancel": {
            "parameters": turn_params(),
            "post": {
                "operationId": "cancelTurn",
                "summary": "Cancel a queued or running turn",
                "requestBody": NO_BODY,
                "description": "A queued turn is cancelled at once (200); a running one at its next "
                "checkpoint (202). A parked or finished turn: 409.",
                "responses": {
                    "200": returns("Cancelled", TURN_REF),
                    "202": returns("Cancel requested", TURN_REF),
                    **errors(*COMMON, "409", "413"),
                },
            },
        },
        f"{SESSION_PATH}/reset": {
            "parameters": session_params(),
            "post": {
                "operationId": "resetSession",
                "summary": "Archive the session and start afresh",
                "requestBody": NO_BODY,
                "responses": {
                    "200": returns(
                        "Archived",
                        {
                            "type": "object",
                            "required": ["previous_session", "generation"],
                            "properties": {
                                "previous_session": {"type": "string", "examples": ["s1#g0"]},
                                "generation": {"type": "integer"},
                            },
                        },
                    ),
                    **errors(*COMMON, "413"),
                },
            },
        },
        f"{SESSION_PATH}/pending": {
            "parameters": session_params(),
            "get": {
                "operationId": "listPending",
                "summary": "The session's parked requests",
                "responses": {
                    "200": returns(
                        "Parked requests",
                        {
                            "type": "object",
                            "properties": {
                                "pending": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "turn_id": {"type": "string"},
                                            "request": {"$ref": "#/components/schemas/InputRequest"},
                                            "may_answer": {"type": "boolean"},
                                        },
                                    },
                                }
                            },
                        },
                    ),
                    **errors(*COMMON),
                },
            },
        },
        f"{SESSION_PATH}/events": {
            "parameters": session_params(),
            "get": {
                "operationId": "streamEvents",
                "summary": "The session's event log as SSE, then live",
                "description": "Replays the live generation's events after `Last-Event-ID` (header, wins) or "
                "`?after=`, then streams live. Reconnect with the last id seen: nothing is "
                "missed or repeated. Long-lived by default, with keep-alive comments.",
                "parameters": [
                    {"name": "Last-Event-ID", "in": "header", "description": "The last seq seen", "schema": SEQ},
                    {"name": "after", "in": "query", "description": "The last seq seen", "schema": SEQ},
                    {
                        "name": "until",
                        "in": "query",
                        "description": "`terminal`: end after the first terminal event (empty: no such end)",
                        "schema": {"type": "string", "enum": ["", "terminal"]},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "description": "End after this many committed events",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                    },
                    {
                        "name": "timeout",
                        "in": "query",
                        "description": "End after this many seconds",
                        "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                    },
                ],
                "responses": {"200": {"description": "An event stream", "content": SSE}, **errors(*COMMON)},
            },
        },
    }
