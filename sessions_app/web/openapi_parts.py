"""The pieces the OpenAPI description is written with (``openapi``, ``openapi_lists``): the
error responses, bodies, parameters and the patterns the routes share."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

from agents_app.runtime.events import EVENT_TYPES as RUNTIME_EVENT_TYPES
from sessions_app import services, wiring

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
    "413": "The body is over 256 KiB, or the text over JUNE_MAX_TEXT_CHARS characters, or too long for the "
    "agent's model context window (code context_window_exceeded; the message names the limit); "
    "attachments: a file over JUNE_ATTACHMENT_MAX_BYTES, more than JUNE_ATTACHMENTS_PER_MESSAGE",
    "415": "An attached file is not a PNG, JPEG, GIF, WebP or PDF (by its bytes)",
    "422": "The answer does not match the request's schema",
    "429": "A rate limit or quota refused the turn (turns per minute, tokens per day); nothing was created. "
    "`Retry-After` (and `error.retry_after`) says in how many seconds to retry; `error.limit` names "
    "the setting",
    "500": "The agent's authorize_answer raised; nothing was applied (retry is safe)",
}


def errors(*codes: str) -> dict[str, Any]:
    return {
        code: {"description": ERROR_TEXT[code], "content": {"application/json": {"schema": ERROR}}} for code in codes
    }


def returns(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def param(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema or {"type": "string"},
    }


#: no string in a JSON body may hold NUL (sessions_app.safejson; unpaired surrogates are refused
#: too, which a pattern cannot say portably)
NO_NUL = "^[^\\x00]*$"
SAFE_STRING = {"type": "string", "pattern": NO_NUL}
#: the server's boolean query values (api.query_bool): 1/0, true/false, yes/no, on/off, any case
BOOL_QUERY = {
    "type": "string",
    "pattern": "^\\s*(1|0|[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo]|[Oo][Nn]|[Oo][Ff][Ff])\\s*$",
}
#: sse.parse_seq: 1-18 ASCII digits (blanks around them ignored); empty is absent
SEQ = {"type": "string", "pattern": "^$|^[ \\t]*[0-9]{1,18}[ \\t]*$"}


def anchored(regex: re.Pattern[str]) -> str:
    """A Python regex the code applies with ``fullmatch``, as a JSON Schema pattern (which
    matches anywhere in the string unless anchored)."""
    return f"^{regex.pattern}$"


TURN_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,32}$"}  # api.TURN_ID_RE; others are 404s


def session_params() -> list[dict[str, Any]]:
    return [
        param(
            "agent",
            "A deployed agent (a folder under the agent directories, e.g. `ops`)",
            {"type": "string", "enum": sorted(wiring.agents())},
        ),
        param(
            "session",
            "Session key: 1-200 of letters, digits and `_ . : @ -`, starting with a letter or "
            "digit; created on first use",
            {"type": "string", "minLength": 1, "maxLength": 200, "pattern": anchored(services.SESSION_KEY_RE)},
        ),
    ]


def turn_params() -> list[dict[str, Any]]:
    return [*session_params(), param("turn_id", "Turn id, as returned when the turn was started", TURN_ID)]


COMMON = ("400", "401", "403", "404", "405")
#: a stream's schema describes ONE event (OpenAPI 3.1 has no ``itemSchema``; 3.2 reads it this way)
SSE = {"text/event-stream": {"schema": {"$ref": "#/components/schemas/ServerSentEvent"}}}
TURN_REF = {"$ref": "#/components/schemas/Turn"}
EVENT_TYPES = list(RUNTIME_EVENT_TYPES)  # every type the runtime defines, in its order
NO_BODY = body({"type": "object", "maxProperties": 0, "description": "Nothing, or `{}`"}, required=False)


def text_schema() -> dict[str, Any]:
    limit = settings.JUNE_MAX_TEXT_CHARS
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": limit,
        "pattern": "^[^\\x00]*[^\\s\\x00][^\\x00]*$",
        "description": f"Not only whitespace, no NUL or unpaired surrogate (400); at most {limit} characters "
        "(JUNE_MAX_TEXT_CHARS; longer: 413), and no more than fits the agent's model context "
        "window beside its instructions (characters / 4; longer: 413 context_window_exceeded, "
        "naming the limit)",
    }
