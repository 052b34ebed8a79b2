"""The OpenAPI description of the lists, the approvals API, search and export (``lists``,
``approvals``, ``search``, ``export``); ``openapi.document`` merges it with the rest."""

from __future__ import annotations

from typing import Any

from sessions_app import services
from sessions_app.web.openapi_parts import (
    COMMON,
    SESSION_PATH,
    TURN_REF,
    anchored,
    body,
    errors,
    param,
    returns,
    session_params,
)

# -- the lists and the approvals API (sessions_app/web/lists.py, approvals.py) ----------


def merge_paths(*parts: dict[str, Any]) -> dict[str, Any]:
    """Path items of several tables, the operations of one path side by side."""
    out: dict[str, Any] = {}
    for part in parts:
        for route, item in part.items():
            out[route] = {**out.get(route, {}), **item}
    return out


#: the lists' cursors (web/lists.py parses exactly these): <updated_at µs>.<pk>, and a turn order;
#: ASCII digits, bounded so that every cursor the pattern admits is a position the server can read
SESSION_CURSOR = r"^([0-9]{1,16})\.([0-9]{1,18})$"
TURN_CURSOR = r"^[0-9]{1,18}$"


def page_params(cursor: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "limit",
            "in": "query",
            "description": "Rows per page (default 50)",
            "schema": {"type": "integer", "minimum": 1, "maximum": 200},
        },
        {
            "name": "cursor",
            "in": "query",
            "description": "The `next` link's cursor of the previous page",
            "schema": {"type": "string", "pattern": cursor},
        },
    ]


NEXT = {"type": ["string", "null"], "description": "The next page's URL (null on the last page)"}


def list_paths() -> dict[str, Any]:
    approval = {"$ref": "#/components/schemas/Approval"}
    return {
        "/api/agents/{agent}/sessions/": {
            "parameters": [session_params()[0]],
            "get": {
                "operationId": "listSessions",
                "summary": "The caller's sessions of the agent, most recent activity first",
                "parameters": page_params(SESSION_CURSOR),
                "responses": {
                    "200": returns(
                        "A page of sessions",
                        {
                            "type": "object",
                            "required": ["sessions", "next"],
                            "properties": {
                                "sessions": {"type": "array", "items": {"$ref": "#/components/schemas/SessionSummary"}},
                                "next": NEXT,
                            },
                        },
                    ),
                    **errors("400", "401", "404", "405"),
                },
            },
        },
        f"{SESSION_PATH}/": {
            "parameters": session_params(),
            "get": {
                "operationId": "getSession",
                "summary": "One of the caller's sessions (the session list's url)",
                "responses": {
                    "200": returns("The session", {"$ref": "#/components/schemas/SessionSummary"}),
                    **errors(*COMMON),
                },
            },
        },
        f"{SESSION_PATH}/turns": {
            "get": {
                "operationId": "listTurns",
                "summary": "The session's turns (its live generation), newest first",
                "parameters": page_params(TURN_CURSOR),
                "responses": {
                    "200": returns(
                        "A page of turns",
                        {
                            "type": "object",
                            "required": ["turns", "next"],
                            "properties": {
                                "turns": {
                                    "type": "array",
                                    "items": {
                                        "allOf": [
                                            TURN_REF,
                                            {
                                                "type": "object",
                                                "properties": {
                                                    "input_text": {"type": "string"},
                                                    "source": {"type": "string"},
                                                    "order": {"type": "integer"},
                                                },
                                            },
                                        ]
                                    },
                                },
                                "next": NEXT,
                            },
                        },
                    ),
                    **errors(*COMMON),
                },
            },
        },
        "/api/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "The site's state for a Prometheus scrape (staff only; text format 0.0.4)",
                "description": "Gauges read from the database: unfinished and parked turns by agent, failures "
                "and retries in the last hour, live workers, today's tokens and cost. "
                "See docs/operations.md.",
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **errors("401", "403", "405"),
                },
            },
        },
        "/api/approvals/": {
            "get": {
                "operationId": "listApprovals",
                "summary": "Every parked request the caller may answer, across sessions, oldest first",
                "description": "The approval inbox over HTTP: requests whose answerers name the caller or "
                "a policy the agent's `authorize_answer` grants the caller now; a request "
                "without answerers is listed to its session's owner and to staff.",
                "responses": {
                    "200": returns(
                        "The waiting requests",
                        {
                            "type": "object",
                            "required": ["approvals"],
                            "properties": {"approvals": {"type": "array", "items": approval}},
                        },
                    ),
                    **errors("401", "405"),
                },
            },
        },
        "/api/approvals/{turn_id}/answer": {
            "parameters": [param("turn_id", "The parked turn's id (from the listing)")],
            "post": {
                "operationId": "answerApproval",
                "summary": "Answer a parked request listed by GET /api/approvals/ (recorded with via=api)",
                "requestBody": body(
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["input_id", "answer"],
                        "properties": {
                            "input_id": {"type": "string", "pattern": anchored(services.INPUT_ID_RE)},
                            "answer": {"description": "Any JSON matching the request's schema"},
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
    }


def list_schemas() -> dict[str, Any]:
    return {
        "SessionSummary": {
            "type": "object",
            "required": ["agent", "session", "status", "updated_at"],
            "properties": {
                "agent": {"type": "string"},
                "session": {"type": "string"},
                "title": {"type": "string"},
                "status": {"type": "string", "enum": ["new", "idle", "running", "suspended"]},
                "generation": {"type": "integer"},
                "preview": {"type": "string", "description": "The last turn's reply (or message), shortened"},
                "last_turn": {
                    "type": ["object", "null"],
                    "properties": {"turn_id": {"type": "string"}, "status": {"type": "string"}},
                },
                "created_at": {"type": "string", "format": "date-time"},
                "updated_at": {"type": "string", "format": "date-time"},
                "url": {"type": "string"},
            },
        },
        "Approval": {
            "type": "object",
            "required": ["turn_id", "agent", "session", "request"],
            "properties": {
                "turn_id": {"type": "string"},
                "agent": {"type": "string"},
                "session": {"type": "string"},
                "request": {"$ref": "#/components/schemas/InputRequest"},
                "call": {"type": "object", "properties": {"name": {"type": ["string", "null"]}, "input": {}}},
                "requested_by": {"type": "string", "description": "Who started the turn that asks"},
                "parked_at": {"type": ["string", "null"], "format": "date-time"},
                "turn_url": {"type": "string"},
                "answer_url": {"type": "string"},
            },
        },
    }


# -- search and export (web/search_views.py, web/downloads.py) ---------------------------------------------


def search_paths() -> dict[str, Any]:
    hit = {
        "type": "object",
        "required": ["agent", "session", "index", "role", "snippet", "url"],
        "properties": {
            "agent": {"type": "string"},
            "session": {"type": "string"},
            "title": {"type": "string"},
            "index": {"type": "integer", "description": "The message's position in the live generation"},
            "role": {"type": "string", "enum": ["user", "trigger", "assistant"]},
            "turn_id": {"type": ["string", "null"]},
            "created_at": {"type": "string", "format": "date-time"},
            "snippet": {"type": "string", "description": "The text around the first match"},
            "snippet_html": {"type": "string", "description": "The snippet escaped, the matches in `<mark>`"},
            "url": {"type": "string", "description": "The chat page opened at this message"},
        },
    }
    return {
        "/api/search": {
            "get": {
                "operationId": "searchMessages",
                "summary": "The caller's own sessions' messages that match, newest first (live generations)",
                "description": 'Words, `"a phrase"`, `-word`; full-text (stemmed) on PostgreSQL and '
                "case-insensitive substrings everywhere. At most 50 hits; `more` says when "
                "there were more.",
                "parameters": [
                    {
                        "name": "q",
                        "in": "query",
                        "required": True,
                        "description": "What to search for: 1-200 characters, not only whitespace, no NUL (else 400)",
                        "schema": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 200,
                            "pattern": "^[^\\x00]*[^\\s\\x00][^\\x00]*$",
                        },
                    }
                ],
                "responses": {
                    "200": returns(
                        "The hits",
                        {
                            "type": "object",
                            "required": ["query", "results", "more"],
                            "properties": {
                                "query": {"type": "string"},
                                "results": {"type": "array", "items": hit},
                                "more": {"type": "boolean"},
                            },
                        },
                    ),
                    **errors("400", "401", "405"),
                },
            },
        },
        f"{SESSION_PATH}/export": {
            "parameters": session_params(),
            "get": {
                "operationId": "exportSession",
                "summary": "The conversation as a download (Content-Disposition: attachment)",
                "description": "The live generation, or an archived one (`generation`): messages with role, "
                "text, tool calls and results, turn ids and times (JSON), or a readable "
                "transcript (Markdown).",
                "parameters": [
                    {
                        "name": "format",
                        "in": "query",
                        "description": "json (default) or md",
                        "schema": {"type": "string", "enum": ["json", "md"]},
                    },
                    {
                        "name": "generation",
                        "in": "query",
                        "description": "An archived generation (default: the live one)",
                        "schema": {"type": "string", "pattern": "^[0-9]{1,9}$"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The conversation",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["messages"],
                                    "properties": {
                                        "agent": {"type": "string"},
                                        "session": {"type": "string"},
                                        "generation": {"type": "integer"},
                                        "live": {"type": "boolean"},
                                        "truncated": {"type": "boolean"},
                                        "messages": {"type": "array", "items": {"type": "object"}},
                                    },
                                }
                            },
                            "text/markdown": {"schema": {"type": "string"}},
                        },
                    },
                    **errors(*COMMON),
                },
            },
        },
    }
