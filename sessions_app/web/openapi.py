"""The OpenAPI 3.1 description of the HTTP API, served at /api/openapi.json.

Written by hand next to the routes (``api_urls``); a test checks that every route is described
with its path parameters and its JSON error responses.
"""

from __future__ import annotations

import re

from typing import Any

from django.conf import settings

from agents_app.runtime.events import EVENT_TYPES as RUNTIME_EVENT_TYPES
from sessions_app import services, wiring
from sessions_app.web.paths import mount

ERROR = {"$ref": "#/components/schemas/Error"}
SESSION_PATH = "/api/agents/{agent}/sessions/{session}"

ERROR_TEXT = {
    "400": "Malformed JSON (also: nested over 64 levels, NUL or an unpaired surrogate in a string, a number "
           "beyond a double's range), a wrong type, an unknown field, a bad session key or query parameter",
    "401": "No credentials, or an invalid bearer token",
    "403": "Another user's session, a failed CSRF check (cookie callers), or not an allowed answerer",
    "404": "Unknown agent, session or turn",
    "405": "Method not allowed",
    "409": "The session or turn is not in a state that allows this",
    "413": "The body is over 256 KiB, or the text over JUNE_MAX_TEXT_CHARS characters",
    "422": "The answer does not match the request's schema",
    "429": "A rate limit or quota refused the turn (turns per minute, tokens per day); nothing was created. "
           "`Retry-After` (and `error.retry_after`) says in how many seconds to retry; `error.limit` names "
           "the setting",
    "500": "The agent's authorize_answer raised; nothing was applied (retry is safe)",
}


def _errors(*codes: str) -> dict[str, Any]:
    return {code: {"description": ERROR_TEXT[code], "content": {"application/json": {"schema": ERROR}}}
            for code in codes}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _param(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema or {"type": "string"}}


#: no string in a JSON body may hold NUL (sessions_app.safejson; unpaired surrogates are refused
#: too, which a pattern cannot say portably)
NO_NUL = "^[^\\x00]*$"
SAFE_STRING = {"type": "string", "pattern": NO_NUL}
#: the server's boolean query values (api.query_bool): 1/0, true/false, yes/no, on/off, any case
BOOL_QUERY = {"type": "string", "pattern": "^\\s*(1|0|[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo]|"
                                         "[Oo][Nn]|[Oo][Ff][Ff])\\s*$"}
#: sse.parse_seq: 1-18 ASCII digits (blanks around them ignored); empty is absent
SEQ = {"type": "string", "pattern": "^$|^[ \\t]*[0-9]{1,18}[ \\t]*$"}


def anchored(regex: "re.Pattern[str]") -> str:
    """A Python regex the code applies with ``fullmatch``, as a JSON Schema pattern (which
    matches anywhere in the string unless anchored)."""
    return f"^{regex.pattern}$"


TURN_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}  # api.TURN_ID_RE; others are 404s


def session_params() -> list[dict[str, Any]]:
    return [
        _param("agent", "A deployed agent (a folder under the agent directories, e.g. `ops`)",
               {"type": "string", "enum": sorted(wiring.agents())}),
        _param("session", "Session key: 1-200 of letters, digits and `_ . : @ -`, starting with a letter or "
                          "digit; created on first use",
               {"type": "string", "minLength": 1, "maxLength": 200, "pattern": anchored(services.SESSION_KEY_RE)}),
    ]


def turn_params() -> list[dict[str, Any]]:
    return [*session_params(), _param("turn_id", "Turn id, as returned when the turn was started", TURN_ID)]


COMMON = ("400", "401", "403", "404", "405")
#: a stream's schema describes ONE event (OpenAPI 3.1 has no ``itemSchema``; 3.2 reads it this way)
SSE = {"text/event-stream": {"schema": {"$ref": "#/components/schemas/ServerSentEvent"}}}
TURN_REF = {"$ref": "#/components/schemas/Turn"}
EVENT_TYPES = list(RUNTIME_EVENT_TYPES)  # every type the runtime defines, in its order
NO_BODY = _body({"type": "object", "maxProperties": 0, "description": "Nothing, or `{}`"}, required=False)


def text_schema() -> dict[str, Any]:
    limit = settings.JUNE_MAX_TEXT_CHARS
    return {"type": "string", "minLength": 1, "maxLength": limit, "pattern": "^[^\\x00]*[^\\s\\x00][^\\x00]*$",
            "description": f"Not only whitespace, no NUL or unpaired surrogate (400); at most {limit} characters "
                           "(JUNE_MAX_TEXT_CHARS; longer: 413)"}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "June for Django HTTP API",
            "version": "1",
            "description": "Agent turns as durable processes: start turns, stream their events, answer "
                           "parked requests, cancel, reset. See docs/api.md.",
        },
        # the paths below are relative to June's mount: "/" at the root, "/assistant" under a prefix
        "servers": [{"url": mount().rstrip("/") or "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": merge_paths(paths(), list_paths(), search_paths()),
        "components": {**(c := components()), "schemas": {**c["schemas"], **list_schemas()}},
    }


def paths() -> dict[str, Any]:
    return {
        "/api/openapi.json": {
            "get": {"operationId": "openapi", "summary": "This document", "security": [],
                    "responses": {"200": _json("The OpenAPI description", {"type": "object"})}},
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
                    {"name": "wait", "in": "query", "description": "Boolean: 1/0, true/false, yes/no, on/off "
                     "(default true)", "schema": BOOL_QUERY},
                    {"name": "replace", "in": "query", "description": "Boolean, as `wait` (default false)",
                     "schema": BOOL_QUERY},
                ],
                "requestBody": _body({
                    "type": "object", "additionalProperties": False, "required": ["text"],
                    "properties": {"text": text_schema(), "replace": {"type": "boolean", "default": False}},
                }),
                "responses": {
                    "200": {"description": "The turn ended (completed, failed, cancelled) or parked (suspended)",
                            "content": {"application/json": {"schema": TURN_REF}, **SSE}},
                    "202": _json("Queued or still running", {
                        "type": "object", "required": ["turn_id", "status"],
                        "properties": {"turn_id": {"type": "string"}, "status": {"type": "string"}}}),
                    **_errors(*COMMON, "409", "413", "429"),
                },
            },
        },
        f"{SESSION_PATH}/turns/{{turn_id}}": {
            "parameters": turn_params(),
            "get": {"operationId": "getTurn", "summary": "A turn: status, result, error, pending request, usage",
                    "responses": {"200": _json("The turn", TURN_REF), **_errors(*COMMON)}},
        },
        f"{SESSION_PATH}/turns/{{turn_id}}/resume": {
            "parameters": turn_params(),
            "post": {
                "operationId": "resumeTurn",
                "summary": "Answer the turn's parked request",
                "requestBody": _body({"type": "object", "additionalProperties": False, "required": ["input_id", "answer"],
                                      "properties": {"input_id": {"type": "string",
                                                                  "pattern": anchored(services.INPUT_ID_RE)},
                                                     "answer": {"$ref": "#/components/schemas/JsonValue",
                                                                "description": "Any JSON matching the request's "
                                                                               "schema"}}}),
                "responses": {"200": _json("The turn ran on and ended, or (status suspended) still waits on "
                                           "another call of the same step", TURN_REF),
                              "202": _json("Accepted: the turn is queued again", TURN_REF),
                              **_errors(*COMMON, "409", "413", "422", "500")},
            },
        },
        f"{SESSION_PATH}/turns/{{turn_id}}/cancel": {
            "parameters": turn_params(),
            "post": {"operationId": "cancelTurn", "summary": "Cancel a queued or running turn", "requestBody": NO_BODY,
                     "description": "A queued turn is cancelled at once (200); a running one at its next "
                                    "checkpoint (202). A parked or finished turn: 409.",
                     "responses": {"200": _json("Cancelled", TURN_REF), "202": _json("Cancel requested", TURN_REF),
                                   **_errors(*COMMON, "409", "413")}},
        },
        f"{SESSION_PATH}/reset": {
            "parameters": session_params(),
            "post": {"operationId": "resetSession", "summary": "Archive the session and start afresh",
                     "requestBody": NO_BODY,
                     "responses": {"200": _json("Archived", {
                         "type": "object", "required": ["previous_session", "generation"],
                         "properties": {"previous_session": {"type": "string", "examples": ["s1#g0"]},
                                        "generation": {"type": "integer"}}}),
                         **_errors(*COMMON, "413")}},
        },
        f"{SESSION_PATH}/pending": {
            "parameters": session_params(),
            "get": {"operationId": "listPending", "summary": "The session's parked requests",
                    "responses": {"200": _json("Parked requests", {
                        "type": "object", "properties": {"pending": {"type": "array", "items": {
                            "type": "object", "properties": {
                                "turn_id": {"type": "string"},
                                "request": {"$ref": "#/components/schemas/InputRequest"},
                                "may_answer": {"type": "boolean"}}}}}}),
                        **_errors(*COMMON)}},
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
                    {"name": "until", "in": "query", "description": "`terminal`: end after the first terminal event "
                     "(empty: no such end)", "schema": {"type": "string", "enum": ["", "terminal"]}},
                    {"name": "limit", "in": "query", "description": "End after this many committed events",
                     "schema": {"type": "integer", "minimum": 1, "maximum": 1_000_000}},
                    {"name": "timeout", "in": "query", "description": "End after this many seconds",
                     "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400}},
                ],
                "responses": {"200": {"description": "An event stream", "content": SSE}, **_errors(*COMMON)},
            },
        },
    }


def components() -> dict[str, Any]:
    return {
        "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "A per-user token: `python manage.py june token <username>` or the admin"},
            "session": {"type": "apiKey", "in": "cookie", "name": "sessionid",
                        "description": "The Django login; unsafe methods need the X-CSRFToken header"},
        },
        "schemas": {
            "Error": {
                "type": "object", "required": ["error"],
                "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string", "examples": ["bad_request", "forbidden", "conflict", "rate_limited"]},
                    "message": {"type": "string"},
                    "retry_after": {"type": "integer", "description": "429 only: seconds until a retry may pass"},
                    "limit": {"type": "string", "description": "429 only: the setting of the limit reached"}}}},
            },
            "Turn": {
                "type": "object", "required": ["turn_id", "status", "text"],
                "properties": {
                    "turn_id": {"type": "string"},
                    "agent": {"type": "string"},
                    "session": {"type": "string"},
                    "status": {"type": "string",
                               "enum": ["queued", "running", "suspended", "completed", "failed", "cancelled"]},
                    "text": {"type": "string", "description": "The final assistant text"},
                    "error": {"type": ["object", "null"]},
                    "pending": {"oneOf": [{"$ref": "#/components/schemas/InputRequest"}, {"type": "null"}]},
                    "pending_requests": {"type": "array", "items": {"$ref": "#/components/schemas/InputRequest"},
                                         "description": "Every request the parked turn waits on (several when one "
                                         "model step's parallel tool calls each need approval; answer them in any "
                                         "order, the turn resumes after the last); `pending` is the first"},
                    "cancel_reason": {"type": ["string", "null"], "enum": ["requested", "replaced", "reset", None]},
                    "usage": {"type": "object", "description": "What the turn's own model calls spent (token counts, "
                              "model_calls); `limited`: the limit its answer was given at; `children`: its subagents' "
                              "trees, summed", "properties": {
                                  "limited": {"type": "string"},
                                  "children": {"type": "object", "additionalProperties": {"type": "integer"}}},
                              "additionalProperties": {"type": ["integer", "string", "object"]}},
                    "generation": {"type": "integer"},
                    "created_at": {"type": "string", "format": "date-time"},
                },
            },
            "JsonValue": {
                "description": "Any JSON value, at most 64 arrays/objects deep; no string (key or value) with NUL "
                               "or an unpaired surrogate; no number beyond a double's range",
                "anyOf": [{"type": ["null", "boolean", "number"]}, SAFE_STRING,
                          {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
                          {"type": "object", "propertyNames": SAFE_STRING,
                           "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}}],
            },
            "ServerSentEvent": {
                "description": "One event of a stream. Committed events carry `id` (the session's event sequence "
                               "number); live deltas (`message.delta`, `reasoning.delta`) carry none (a client "
                               "keeps the last id it saw). The stream opens with `retry: 2000`; comment lines "
                               "(`: keep-alive`, `: timeout`) come while idle and when a time bound ends it.",
                "type": "object", "required": ["data", "event"],
                "properties": {
                    "event": {"type": "string", "enum": EVENT_TYPES},
                    "id": {"type": "string", "pattern": "^[0-9]+$"},
                    "retry": {"type": "integer"},
                    "data": {"type": "string", "contentMediaType": "application/json",
                             "contentSchema": {"$ref": "#/components/schemas/Event"}},
                },
            },
            "InputRequest": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "prompt": {"type": "string"},
                               "schema": {"type": "object"}, "answerers": {"type": ["object", "null"]}},
            },
            "Event": {
                "type": "object", "required": ["type", "turn_id"],
                "properties": {"type": {"type": "string", "enum": EVENT_TYPES}, "turn_id": {"type": "string"}},
                "additionalProperties": True,
            },
        },
    }


# -- the lists and the approvals API (issue 17: sessions_app/web/lists.py, approvals.py) ----------

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
        {"name": "limit", "in": "query", "description": "Rows per page (default 50)",
         "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
        {"name": "cursor", "in": "query", "description": "The `next` link's cursor of the previous page",
         "schema": {"type": "string", "pattern": cursor}},
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
                "responses": {"200": _json("A page of sessions", {
                    "type": "object", "required": ["sessions", "next"],
                    "properties": {"sessions": {"type": "array", "items": {"$ref": "#/components/schemas/SessionSummary"}},
                                   "next": NEXT}}),
                    **_errors("400", "401", "404", "405")},
            },
        },
        f"{SESSION_PATH}/": {
            "parameters": session_params(),
            "get": {
                "operationId": "getSession",
                "summary": "One of the caller's sessions (the session list's url)",
                "responses": {"200": _json("The session", {"$ref": "#/components/schemas/SessionSummary"}),
                              **_errors(*COMMON)},
            },
        },
        f"{SESSION_PATH}/turns": {
            "get": {
                "operationId": "listTurns",
                "summary": "The session's turns (its live generation), newest first",
                "parameters": page_params(TURN_CURSOR),
                "responses": {"200": _json("A page of turns", {
                    "type": "object", "required": ["turns", "next"],
                    "properties": {"turns": {"type": "array", "items": {"allOf": [TURN_REF, {
                        "type": "object", "properties": {"input_text": {"type": "string"},
                                                         "source": {"type": "string"},
                                                         "order": {"type": "integer"}}}]}},
                                   "next": NEXT}}),
                    **_errors(*COMMON)},
            },
        },
        "/api/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "The site's state for a Prometheus scrape (staff only; text format 0.0.4)",
                "description": "Gauges read from the database: unfinished and parked turns by agent, failures "
                               "and retries in the last hour, live workers, today's tokens and cost. "
                               "See docs/operations.md.",
                "responses": {"200": {"description": "Prometheus text exposition",
                                      "content": {"text/plain": {"schema": {"type": "string"}}}},
                              **_errors("401", "403", "405")},
            },
        },
        "/api/approvals/": {
            "get": {
                "operationId": "listApprovals",
                "summary": "Every parked request the caller may answer, across sessions, oldest first",
                "description": "The approval inbox over HTTP: requests whose answerers name the caller or "
                               "a policy the agent's `authorize_answer` grants the caller now; a request "
                               "without answerers is listed to its session's owner and to staff.",
                "responses": {"200": _json("The waiting requests", {
                    "type": "object", "required": ["approvals"],
                    "properties": {"approvals": {"type": "array", "items": approval}}}),
                    **_errors("401", "405")},
            },
        },
        "/api/approvals/{turn_id}/answer": {
            "parameters": [_param("turn_id", "The parked turn's id (from the listing)")],
            "post": {
                "operationId": "answerApproval",
                "summary": "Answer a parked request listed by GET /api/approvals/ (recorded with via=api)",
                "requestBody": _body({"type": "object", "additionalProperties": False, "required": ["input_id", "answer"],
                                      "properties": {"input_id": {"type": "string",
                                                                  "pattern": anchored(services.INPUT_ID_RE)},
                                                     "answer": {"description": "Any JSON matching the request's schema"}}}),
                "responses": {"200": _json("The turn ran on and ended, or (status suspended) still waits on "
                                           "another call of the same step", TURN_REF),
                              "202": _json("Accepted: the turn is queued again", TURN_REF),
                              **_errors(*COMMON, "409", "413", "422", "500")},
            },
        },
    }


def list_schemas() -> dict[str, Any]:
    return {
        "SessionSummary": {
            "type": "object", "required": ["agent", "session", "status", "updated_at"],
            "properties": {
                "agent": {"type": "string"}, "session": {"type": "string"}, "title": {"type": "string"},
                "status": {"type": "string", "enum": ["new", "idle", "running", "suspended"]},
                "generation": {"type": "integer"},
                "preview": {"type": "string", "description": "The last turn's reply (or message), shortened"},
                "last_turn": {"type": ["object", "null"], "properties": {"turn_id": {"type": "string"},
                                                                         "status": {"type": "string"}}},
                "created_at": {"type": "string", "format": "date-time"},
                "updated_at": {"type": "string", "format": "date-time"},
                "url": {"type": "string"},
            },
        },
        "Approval": {
            "type": "object", "required": ["turn_id", "agent", "session", "request"],
            "properties": {
                "turn_id": {"type": "string"}, "agent": {"type": "string"}, "session": {"type": "string"},
                "request": {"$ref": "#/components/schemas/InputRequest"},
                "call": {"type": "object", "properties": {"name": {"type": ["string", "null"]}, "input": {}}},
                "requested_by": {"type": "string", "description": "Who started the turn that asks"},
                "parked_at": {"type": ["string", "null"], "format": "date-time"},
                "turn_url": {"type": "string"}, "answer_url": {"type": "string"},
            },
        },
    }


# -- search and export (web/search.py, web/export.py) ---------------------------------------------

def search_paths() -> dict[str, Any]:
    hit = {"type": "object", "required": ["agent", "session", "index", "role", "snippet", "url"], "properties": {
        "agent": {"type": "string"}, "session": {"type": "string"}, "title": {"type": "string"},
        "index": {"type": "integer", "description": "The message's position in the live generation"},
        "role": {"type": "string", "enum": ["user", "trigger", "assistant"]},
        "turn_id": {"type": ["string", "null"]}, "created_at": {"type": "string", "format": "date-time"},
        "snippet": {"type": "string", "description": "The text around the first match"},
        "snippet_html": {"type": "string", "description": "The snippet escaped, the matches in `<mark>`"},
        "url": {"type": "string", "description": "The chat page opened at this message"}}}
    return {
        "/api/search": {
            "get": {
                "operationId": "searchMessages",
                "summary": "The caller's own sessions' messages that match, newest first (live generations)",
                "description": "Words, `\"a phrase\"`, `-word`; full-text (stemmed) on PostgreSQL and "
                               "case-insensitive substrings everywhere. At most 50 hits; `more` says when "
                               "there were more.",
                "parameters": [{"name": "q", "in": "query", "required": True,
                                "description": "What to search for: 1-200 characters, not only whitespace, no NUL "
                                               "(else 400)",
                                "schema": {"type": "string", "minLength": 1, "maxLength": 200,
                                           "pattern": "^[^\\x00]*[^\\s\\x00][^\\x00]*$"}}],
                "responses": {"200": _json("The hits", {
                    "type": "object", "required": ["query", "results", "more"],
                    "properties": {"query": {"type": "string"}, "results": {"type": "array", "items": hit},
                                   "more": {"type": "boolean"}}}),
                    **_errors("400", "401", "405")},
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
                    {"name": "format", "in": "query", "description": "json (default) or md",
                     "schema": {"type": "string", "enum": ["json", "md"]}},
                    {"name": "generation", "in": "query", "description": "An archived generation (default: the live one)",
                     "schema": {"type": "string", "pattern": "^[0-9]{1,9}$"}}],
                "responses": {"200": {"description": "The conversation", "content": {
                    "application/json": {"schema": {"type": "object", "required": ["messages"], "properties": {
                        "agent": {"type": "string"}, "session": {"type": "string"}, "generation": {"type": "integer"},
                        "live": {"type": "boolean"}, "truncated": {"type": "boolean"},
                        "messages": {"type": "array", "items": {"type": "object"}}}}},
                    "text/markdown": {"schema": {"type": "string"}}}},
                    **_errors(*COMMON)},
            },
        },
    }
