"""The shapes every area of the API shares: a turn, a parked request, an event and its SSE
frame, the path parameters of a session's routes, and the value types whose rules live in the
services (a turn's text, attachment ids, a boolean or a number in a query).

A value whose schema depends on the site (its agents, JUNE_MAX_TEXT_CHARS, the attachment
limits) reads it when the document is made (``Site``), not at import."""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Literal

from django.conf import settings
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError
from typing_extensions import NotRequired, TypeAliasType, TypedDict

from agents_app import attachments as files
from agents_app.runtime.events import EVENT_TYPES
from sessions_app import services, wiring
from sessions_app.web.inputs import BODY, QUERY

SESSION_PATH = "/api/agents/{agent}/sessions/{session}"


class Site:
    """Annotation: a schema made from the site's settings when the document is made; merged
    into the type's own (``replace``: instead of it)."""

    def __init__(self, make: Callable[[], dict[str, Any]], *, replace: bool = False) -> None:
        self.make, self.replace = make, replace

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        return self.make() if self.replace else {**handler(core_schema), **self.make()}


def anchored(regex: Any) -> str:
    """A Python regex the code applies with ``fullmatch``, as a JSON Schema pattern (which
    matches anywhere in the string unless anchored)."""
    return f"^{regex.pattern}$"


# -- values --------------------------------------------------------------------------------------------

#: no string in a JSON body may hold NUL (``safejson``; unpaired surrogates are refused too, which a
#: pattern cannot say portably)
NO_NUL = "^[^\\x00]*$"
NOT_BLANK = "^[^\\x00]*[^\\s\\x00][^\\x00]*$"
DateTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
MaybeDateTime = Annotated[str | None, WithJsonSchema({"type": ["string", "null"], "format": "date-time"})]


def text_schema() -> dict[str, Any]:
    limit = settings.JUNE_MAX_TEXT_CHARS
    return {
        "minLength": 1,
        "maxLength": limit,
        "pattern": NOT_BLANK,
        "description": f"Not only whitespace, no NUL or unpaired surrogate (400); at most {limit} characters "
        "(JUNE_MAX_TEXT_CHARS; longer: 413), and no more than fits the agent's model context "
        "window beside its instructions (characters / 4; longer: 413 context_window_exceeded, "
        "naming the limit)",
    }


#: a message's text: its rules are ``services.validate_text``'s (400, or 413 over the limit)
Text = Annotated[str, Site(text_schema)]
#: a body with a ``Text``: the document asks for ``text`` always (empty beside attachments); the
#: server also takes it absent there, as it always has
ASKS_TEXT = ConfigDict(**BODY, json_schema_extra={"required": ["text"]})
AttachmentId = Annotated[str, WithJsonSchema({"type": "string", "pattern": anchored(files.ID_RE)})]


def _ids_schema() -> dict[str, Any]:
    return {
        "uniqueItems": True,
        "maxItems": settings.JUNE_ATTACHMENTS_PER_MESSAGE,
        "description": "Ids of your unsent uploads to this session (404: not yours; 409: already sent). "
        "With attachments, `text` may be empty.",
    }


#: ``attachments`` of a start: its rules are ``attachment_services.parse_ids``'s (413 over the count,
#: 400 for a repeated id, 404 for one not issued)
AttachmentIds = Annotated[list[AttachmentId], Site(_ids_schema)]

#: the server's boolean query words, any case, blanks around them ignored
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
BOOL_QUERY = {
    "type": "string",
    "pattern": "^\\s*(1|0|[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|[Yy][Ee][Ss]|[Nn][Oo]|[Oo][Nn]|[Oo][Ff][Ff])\\s*$",
}


def _bool_word(value: Any) -> bool:
    lowered = str(value).strip().lower()
    if lowered in TRUE_WORDS or lowered in FALSE_WORDS:
        return lowered in TRUE_WORDS
    raise PydanticCustomError("bool_word", "must be true or false")


BoolWord = Annotated[bool, BeforeValidator(_bool_word), WithJsonSchema(BOOL_QUERY)]


INTEGER_RE = re.compile(r"[0-9]{1,20}")
NUMBER_RE = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?")


def ascii_number(maximum: float, *, integer: bool, schema: dict[str, Any]) -> Any:
    """A query number: ASCII digits only (``int``/``float`` also take "٣", "1_0", "inf"),
    greater than 0, at most ``maximum``; absent or empty is None."""
    regex = INTEGER_RE if integer else NUMBER_RE

    def parse(value: Any) -> float | None:
        if value is None or value == "":
            return None
        if not regex.fullmatch(value):
            raise PydanticCustomError("number", "must be an integer" if integer else "must be a number")
        number = int(value) if integer else float(value)
        if not 0 < number <= maximum:
            raise PydanticCustomError("number", f"must be greater than 0 and at most {maximum:g}")
        return number

    return Annotated[float | None, BeforeValidator(parse), WithJsonSchema(schema)]


# -- path parameters (the views answer 404 for a value outside these, by their own checks) --------------


def _agents() -> dict[str, Any]:
    return {"enum": sorted(wiring.agents())}


AgentName = Annotated[
    str, Site(_agents), Field(description="A deployed agent (a folder under the agent directories, e.g. `ops`)")
]
SessionKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=anchored(services.SESSION_KEY_RE),
        description="Session key: 1-200 of letters, digits and `_ . : @ -`, starting with a letter or digit; "
        "created on first use",
    ),
]
TurnId = Annotated[
    str,
    Field(pattern="^[A-Za-z0-9_-]{1,32}$", description="Turn id, as returned when the turn was started"),
]  # api.TURN_ID_RE


class AgentPath(BaseModel):
    model_config = QUERY
    agent: AgentName


class SessionPath(AgentPath):
    session: SessionKey


class TurnPath(SessionPath):
    turn_id: TurnId


#: the path parameters of the API's routes, unless a route says one its own way
PathParams = TurnPath


# -- what the routes answer ----------------------------------------------------------------------------


class InputRequest(TypedDict, total=False):
    """What a parked turn asks: its id, the question, the answer's schema, who may answer it."""

    id: str
    prompt: str
    schema: dict[str, Any]
    answerers: dict[str, Any] | None


TurnStatusName = Literal["queued", "running", "suspended", "completed", "failed", "cancelled"]
#: what a turn's ``usage`` holds (free-form: token counts by kind, each as the provider names it)
USAGE = {
    "type": "object",
    "description": "What the turn's own model calls spent (token counts, model_calls); `limited`: the limit "
    "its answer was given at; `children`: its subagents' trees, summed; `served_by`: who answered its "
    "model calls (`<provider>:<model>`, each once); `batch_input_tokens`, `batch_output_tokens`, …: the "
    "part of the counts answered through the Message Batches API, priced at the batch price "
    "(`anthropic-batch:<model>`)",
    "properties": {
        "limited": {"type": "string"},
        "served_by": {"type": "array", "items": {"type": "string"}},
        "children": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "additionalProperties": {"type": ["integer", "string", "object", "array"]},
}


class Turn(TypedDict):
    """A turn: status, result, error, pending request, usage."""

    turn_id: str
    agent: str
    session: str
    status: TurnStatusName
    text: Annotated[str, Field(description="The final assistant text")]
    error: dict[str, Any] | None
    pending: InputRequest | None
    pending_requests: Annotated[
        list[InputRequest],
        Field(
            description="Every request the parked turn waits on (several when one model step's parallel tool "
            "calls each need approval; answer them in any order, the turn resumes after the last); "
            "`pending` is the first"
        ),
    ]
    cancel_reason: Literal["requested", "replaced", "reset"] | None
    usage: Annotated[dict[str, Any], WithJsonSchema(USAGE)]
    generation: int
    created_at: Annotated[DateTime, Field(description="When it was queued")]
    started_at: Annotated[MaybeDateTime, Field(description="When a worker first claimed it (null while queued)")]
    ended_at: Annotated[
        MaybeDateTime, Field(description="When it completed, failed or was cancelled (null until then)")
    ]


def _event_types() -> dict[str, Any]:
    return {"enum": list(EVENT_TYPES)}  # every type the runtime defines, in its order


class Event(TypedDict):
    """One event of a session's log (its other fields are the type's own)."""

    type: Annotated[str, Site(_event_types)]
    turn_id: str


class ServerSentEvent(TypedDict):
    """One event of a stream. Committed events carry `id` (the session's event sequence number); live
    deltas (`message.delta`, `reasoning.delta`) carry none (a client keeps the last id it saw). The
    stream opens with `retry: 2000`; comment lines (`: keep-alive`, `: timeout`) come while idle and
    when a time bound ends it."""

    event: Annotated[str, Site(_event_types)]
    id: NotRequired[Annotated[str, Field(pattern="^[0-9]+$")]]
    retry: NotRequired[int]
    data: Annotated[
        str,
        WithJsonSchema(
            {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": "#/components/schemas/Event"},
            }
        ),
    ]


#: a stream's schema describes ONE event (OpenAPI 3.1 has no ``itemSchema``; 3.2 reads it this way)
SSE = {"text/event-stream": ServerSentEvent}

#: any JSON ``safejson`` admits (which parses it first): the types of a JSON document, its strings
#: and keys without NUL
SafeString = Annotated[str, Field(pattern=NO_NUL)]
JsonValue = TypeAliasType(
    "JsonValue",
    Annotated[  # type: ignore[misc]
        None | bool | int | float | SafeString | list["JsonValue"] | dict[SafeString, "JsonValue"],
        Field(
            description="Any JSON value, at most 64 arrays/objects deep; no string (key or value) with NUL "
            "or an unpaired surrogate; no number beyond a double's range"
        ),
    ],
)
#: classes the document defines that no operation names: the SSE frame's ``contentSchema`` refers
#: to ``Event``
NAMED: list[Any] = [Event]
