"""The branches' part of the OpenAPI document (``openapi.document`` merges it): edit an earlier
message, regenerate the last reply, list and switch branches. The routes: ``web/branches``."""

from __future__ import annotations

from typing import Any

from sessions_app.web.openapi_files import ids_schema
from sessions_app.web.openapi_parts import (
    COMMON,
    ERROR,
    NO_BODY,
    SESSION_PATH,
    body,
    errors,
    param,
    returns,
    session_params,
    text_schema,
    turn_params,
)

NUMBER = {"type": "string", "pattern": "^[0-9]{1,9}$"}  # branches.NUMBER_RE; others are 404s
BUSY = {
    "description": "The session has a turn queued, running or waiting for an answer (code session_busy): "
    "branches are made and switched only while it is idle; or (regenerate) the turn is not "
    "the live branch's last turn a person opened",
    "content": {"application/json": {"schema": ERROR}},
}
QUEUED = returns(
    "The new branch is live and its first turn is queued (follow it at `Location`)",
    {
        "type": "object",
        "required": ["turn_id", "status", "generation"],
        "properties": {
            "turn_id": {"type": "string"},
            "status": {"type": "string"},
            "generation": {"type": "integer", "description": "The new branch"},
        },
    },
)
BRANCHES = {
    "type": "object",
    "required": ["generation", "seq", "openings", "branches"],
    "properties": {
        "generation": {"type": "integer", "description": "The live branch"},
        "seq": {
            "type": "integer",
            "description": "The session's last event number (any branch): it moves with every "
            "switch, so a page that finds another branch live can tell a new switch from one it "
            "already followed",
        },
        "openings": {
            "type": "array",
            "description": "Each message of the live branch a person sent to open a "
            "turn, oldest first: where an edit forks (`index`) and the branches a switcher steps "
            "through there (`alternatives`, oldest first; `current` holds the live branch's message)",
            "items": {
                "type": "object",
                "required": ["index", "turn_id", "alternatives", "current"],
                "properties": {
                    "index": {"type": "integer"},
                    "turn_id": {"type": "string"},
                    "alternatives": {"type": "array", "items": {"type": "integer"}},
                    "current": {"type": "integer"},
                },
            },
        },
        "branches": {
            "type": "array",
            "description": "The live branch's tree (empty before its first fork)",
            "items": {
                "type": "object",
                "required": ["generation", "parent", "fork_index", "created_at"],
                "properties": {
                    "generation": {"type": "integer"},
                    "parent": {"type": ["integer", "null"]},
                    "fork_index": {"type": "integer"},
                    "created_at": {"type": "string", "format": "date-time"},
                },
            },
        },
    },
}


def branch_paths() -> dict[str, Any]:
    not_a_fork_point = {
        "description": "The message is not one a person sent to open a turn of the live branch (code not_a_fork_point)",
        "content": {"application/json": {"schema": ERROR}},
    }
    return {
        f"{SESSION_PATH}/messages/{{index}}/fork": {
            "parameters": [
                *session_params(),
                param(
                    "index",
                    "The position of the message to edit in the live branch (`openings[].index` of `GET …/branches`)",
                    NUMBER,
                ),
            ],
            "post": {
                "operationId": "forkAtMessage",
                "summary": "Edit an earlier message: a new branch from just before it",
                "description": "The new branch shares the messages before `index` and is made live; `text` is "
                "queued as its first turn, whose model sees this branch only. The branch left "
                "stays (`GET …/branches`, `POST …/branches/{generation}/switch`).",
                "requestBody": body(
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["text"],
                        "properties": {"text": text_schema(), "attachments": ids_schema()},
                    }
                ),
                "responses": {
                    "202": QUEUED,
                    **errors(*COMMON, "413", "429"),
                    "409": BUSY,
                    "422": not_a_fork_point,
                },
            },
        },
        f"{SESSION_PATH}/turns/{{turn_id}}/regenerate": {
            "parameters": turn_params(),
            "post": {
                "operationId": "regenerateTurn",
                "summary": "Send the last turn again, on a new branch",
                "description": "The live branch's last turn a person opened is sent again (its attachments "
                "too) as the first turn of a new branch forked just before it; the reply it had "
                "stays on the branch left.",
                "requestBody": NO_BODY,
                "responses": {"202": QUEUED, **errors(*COMMON, "413", "429"), "409": BUSY},
            },
        },
        f"{SESSION_PATH}/branches": {
            "parameters": session_params(),
            "get": {
                "operationId": "listBranches",
                "summary": "The live branch, its tree and its switchers",
                "responses": {"200": returns("Branches", BRANCHES), **errors(*COMMON)},
            },
        },
        f"{SESSION_PATH}/branches/{{generation}}/switch": {
            "parameters": [*session_params(), param("generation", "A branch of the live branch's tree", NUMBER)],
            "post": {
                "operationId": "switchBranch",
                "summary": "Make another branch live",
                "requestBody": NO_BODY,
                "responses": {
                    "200": returns(
                        "Live",
                        {
                            "type": "object",
                            "required": ["generation"],
                            "properties": {"generation": {"type": "integer"}},
                        },
                    ),
                    **errors(*COMMON, "413"),
                    "409": BUSY,
                },
            },
        },
    }
