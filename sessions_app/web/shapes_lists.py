"""The API's lists and reads across sessions: the caller's sessions and a session's turns
(paginated), the approvals API, search, export and the metrics scrape — their shapes and their
rows of the route table (the views: ``lists``, ``approvals``, ``search_views``, ``downloads``,
``prometheus``)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from typing_extensions import Required, TypedDict

from sessions_app import listings, search
from sessions_app.web.apispec import COMMON, Op, Reply, returns
from sessions_app.web.inputs import QUERY
from sessions_app.web.shapes_common import (
    NOT_BLANK,
    SESSION_PATH,
    DateTime,
    InputRequest,
    MaybeDateTime,
    Turn,
    ascii_number,
)
from sessions_app.web.shapes_turns import SETTLED, Answer

# -- the lists ------------------------------------------------------------------------------------------

#: the lists' cursors (``lists`` parses exactly these): <updated_at µs>.<pk>, and a turn order; ASCII
#: digits, bounded so that every cursor the pattern admits is a position the server can read
SESSION_CURSOR_RE = re.compile(r"([0-9]{1,16})\.([0-9]{1,18})")
TURN_CURSOR_RE = re.compile(r"[0-9]{1,18}")
PageLimit = Annotated[
    ascii_number(listings.PAGE_MAX, integer=True, schema={"type": "integer", "minimum": 1, "maximum": 200}),
    Field(description="Rows per page (default 50)"),
]


def _cursor(regex: re.Pattern[str]) -> Any:
    return Annotated[
        str | None,
        WithJsonSchema({"type": "string", "pattern": f"^{regex.pattern}$"}),
        Field(description="The `next` link's cursor of the previous page"),
    ]


class SessionPageQuery(BaseModel):
    model_config = QUERY
    limit: PageLimit = None
    cursor: _cursor(SESSION_CURSOR_RE) = None


class TurnPageQuery(SessionPageQuery):
    cursor: _cursor(TURN_CURSOR_RE) = None


Next = Annotated[str | None, Field(description="The next page's URL (null on the last page)")]


class LastTurn(TypedDict):
    turn_id: str
    status: str


class SessionSummary(TypedDict):
    agent: str
    session: str
    title: str
    status: Literal["new", "idle", "running", "suspended"]
    generation: int
    preview: Annotated[str, Field(description="The last turn's reply (or message), shortened")]
    last_turn: LastTurn | None
    created_at: DateTime
    updated_at: DateTime
    url: str


class SessionPage(TypedDict):
    sessions: list[SessionSummary]
    next: Next


class ListedTurn(Turn):
    input_text: str
    source: str
    order: int


class TurnPage(TypedDict):
    turns: list[ListedTurn]
    next: Next


# -- the approvals API ----------------------------------------------------------------------------------


class Call(TypedDict):
    name: str | None
    input: Any


class Approval(TypedDict):
    turn_id: str
    agent: str
    session: str
    request: InputRequest
    call: Call
    requested_by: Annotated[
        str,
        Field(
            description="Who started the turn that asks, in words: a name, an account, or what started it (a webhook call, a schedule, an eval run)"
        ),
    ]
    parked_at: MaybeDateTime
    turn_url: str
    answer_url: str


class ApprovalList(TypedDict):
    approvals: list[Approval]


class ApprovalPath(BaseModel):
    model_config = QUERY
    turn_id: Annotated[str, Field(description="The parked turn's id (from the listing)")]


# -- search and export ----------------------------------------------------------------------------------


class SearchQuery(BaseModel):
    """``q``'s rules are ``search.parse_query``'s (the session list's search box applies them too)."""

    model_config = ConfigDict(**QUERY, json_schema_extra={"required": ["q"]})
    q: Annotated[
        str,
        WithJsonSchema({"type": "string", "minLength": 1, "maxLength": search.MAX_QUERY_CHARS, "pattern": NOT_BLANK}),
        Field(description="What to search for: 1-200 characters, not only whitespace, no NUL (else 400)"),
    ] = ""


class Hit(TypedDict):
    agent: str
    session: str
    title: str
    index: Annotated[int, Field(description="The message's position in the live generation")]
    role: Literal["user", "trigger", "assistant"]
    turn_id: str | None
    created_at: DateTime
    snippet: Annotated[str, Field(description="The text around the first match")]
    snippet_html: Annotated[str, Field(description="The snippet escaped, the matches in `<mark>`")]
    url: Annotated[str, Field(description="The chat page opened at this message")]


class SearchResults(TypedDict):
    query: str
    results: list[Hit]
    more: bool


#: ``?generation=`` of an export: what an int4 column holds
GENERATION_RE = re.compile(r"[0-9]{1,9}")


class ExportQuery(BaseModel):
    model_config = QUERY
    format: Annotated[Literal["json", "md"], Field(description="json (default) or md")] = "json"
    generation: Annotated[
        str | None,
        WithJsonSchema({"type": "string", "pattern": f"^{GENERATION_RE.pattern}$"}),
        Field(description="An archived generation (default: the live one)"),
    ] = None


class Export(TypedDict, total=False):
    messages: Required[list[dict[str, Any]]]
    agent: str
    session: str
    generation: int
    live: bool
    truncated: bool


# -- the route table -----------------------------------------------------------------------------------

OPERATIONS = [
    Op(
        "get",
        "/api/agents/{agent}/sessions/",
        "listSessions",
        "The caller's sessions of the agent, most recent activity first",
        query=SessionPageQuery,
        responses={"200": returns("A page of sessions", SessionPage)},
        errors=("400", "401", "404", "405"),
    ),
    Op(
        "get",
        f"{SESSION_PATH}/",
        "getSession",
        "One of the caller's sessions (the session list's url)",
        responses={"200": returns("The session", SessionSummary)},
    ),
    Op(
        "get",
        f"{SESSION_PATH}/turns",
        "listTurns",
        "The session's turns (its live generation), newest first",
        query=TurnPageQuery,
        responses={"200": returns("A page of turns", TurnPage)},
    ),
    Op(
        "get",
        "/api/metrics",
        "metrics",
        "The site's state for a Prometheus scrape (staff only; text format 0.0.4)",
        "Gauges read from the database: unfinished and parked turns by agent, failures "
        "and retries in the last hour, live workers, today's tokens and cost. "
        "See docs/operations.md.",
        responses={"200": Reply("Prometheus text exposition", {"text/plain": str})},
        errors=("401", "403", "405"),
    ),
    Op(
        "get",
        "/api/approvals/",
        "listApprovals",
        "Every parked request the caller may answer, across sessions, oldest first",
        "The approval inbox over HTTP: requests whose answerers name the caller or "
        "a policy the agent's `authorize_answer` grants the caller now; a request "
        "without answerers is listed to its session's owner and to staff.",
        responses={"200": returns("The waiting requests", ApprovalList)},
        errors=("401", "405"),
    ),
    Op(
        "post",
        "/api/approvals/{turn_id}/answer",
        "answerApproval",
        "Answer a parked request listed by GET /api/approvals/ (recorded with via=api)",
        path_params=ApprovalPath,
        body={"application/json": Answer},
        responses={"200": returns(SETTLED, Turn), "202": returns("Accepted: the turn is queued again", Turn)},
        errors=(*COMMON, "409", "413", "422", "500"),
    ),
    Op(
        "get",
        "/api/search",
        "searchMessages",
        "The caller's own sessions' messages that match, newest first (live generations)",
        'Words, `"a phrase"`, `-word`; full-text (stemmed) on PostgreSQL and '
        "case-insensitive substrings everywhere. At most 50 hits; `more` says when "
        "there were more.",
        query=SearchQuery,
        responses={"200": returns("The hits", SearchResults)},
        errors=("400", "401", "405"),
    ),
    Op(
        "get",
        f"{SESSION_PATH}/export",
        "exportSession",
        "The conversation as a download (Content-Disposition: attachment)",
        "The live generation, or an archived one (`generation`): messages with role, "
        "text, tool calls and results, turn ids and times (JSON), or a readable "
        "transcript (Markdown).",
        query=ExportQuery,
        responses={"200": Reply("The conversation", {"application/json": Export, "text/markdown": str})},
    ),
]
