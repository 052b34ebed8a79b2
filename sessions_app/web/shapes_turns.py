"""A session's turns over HTTP: start one (JSON or multipart), read, answer, cancel, reset, the
parked requests, the event stream — their shapes and their rows of the route table (the views:
``api``, ``api_turns``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import BaseModel, BeforeValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from sessions_app import services
from sessions_app.web.apispec import COMMON, Op, Reply, returns
from sessions_app.web.inputs import BODY, QUERY
from sessions_app.web.shapes_common import (
    ASKS_TEXT,
    NO_NUL,
    SESSION_PATH,
    SSE,
    AttachmentIds,
    BoolWord,
    InputRequest,
    JsonValue,
    Site,
    Text,
    Turn,
    anchored,
    ascii_number,
    text_schema,
)

# -- starting a turn -------------------------------------------------------------------------------------


class StartTurn(BaseModel):
    """A turn's start: its text, and the ids of uploads it carries."""

    model_config = ASKS_TEXT

    text: Text = None  # type: ignore[assignment]
    replace: bool = False
    attachments: AttachmentIds = []


class StartTurnQuery(BaseModel):
    model_config = QUERY
    wait: Annotated[BoolWord, Field(description="Boolean: 1/0, true/false, yes/no, on/off (default true)")] = True
    replace: Annotated[BoolWord, Field(description="Boolean, as `wait` (default false)")] = False


def _replace_word(value: Any) -> str:
    word = str(value).strip().lower()
    if word not in ("true", "false", "1", "0", ""):
        raise PydanticCustomError("bool_word", "must be true or false")
    return word


def _form_text() -> dict[str, Any]:
    base = text_schema()
    return {
        **base,
        "minLength": 0,
        "pattern": NO_NUL,
        "description": base["description"] + "; may be empty (or absent) with files",
    }


def _files() -> dict[str, Any]:
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": settings.JUNE_ATTACHMENTS_PER_MESSAGE,
        "items": {"type": "string", "contentMediaType": "application/octet-stream"},
    }


class TurnForm(BaseModel):
    """A turn's start as multipart: the text and the files in one request."""

    model_config = BODY
    text: Annotated[str, Site(_form_text)] = ""
    replace: Annotated[
        str, BeforeValidator(_replace_word), WithJsonSchema({"type": "string", "enum": ["true", "false", "1", "0"]})
    ] = "false"
    file: Annotated[list[Any], Site(_files, replace=True)]


class Queued(TypedDict):
    turn_id: str
    status: str


# -- answering, cancelling, resetting ------------------------------------------------------------------


class Answer(BaseModel):
    """An answer to a parked request: which request, and the answer (JSON its schema accepts)."""

    model_config = BODY
    input_id: Annotated[str, Field(pattern=anchored(services.INPUT_ID_RE))]
    answer: Annotated[JsonValue, Field(description="Any JSON matching the request's schema")]


class Nothing(BaseModel):
    """Nothing, or `{}`"""

    model_config = BODY


class Archived(TypedDict):
    previous_session: Annotated[str, Field(examples=["s1#g0"])]
    generation: int


class PendingRequest(TypedDict):
    turn_id: str
    request: InputRequest
    may_answer: bool


class PendingList(TypedDict):
    pending: list[PendingRequest]


# -- the event stream ----------------------------------------------------------------------------------

#: ``sse.parse_seq``: 1-18 ASCII digits (blanks around them ignored); empty is absent
SEQ = {"type": "string", "pattern": "^$|^[ \\t]*[0-9]{1,18}[ \\t]*$"}
Seq = Annotated[str | None, WithJsonSchema(SEQ)]


class EventsQuery(BaseModel):
    model_config = QUERY
    after: Annotated[Seq, Field(description="The last seq seen")] = None
    until: Annotated[
        Literal["", "terminal"],
        Field(description="`terminal`: end after the first terminal event (empty: no such end)"),
    ] = ""
    limit: Annotated[
        ascii_number(1_000_000, integer=True, schema={"type": "integer", "minimum": 1, "maximum": 1_000_000}),
        Field(description="End after this many committed events"),
    ] = None
    timeout: Annotated[
        ascii_number(86_400, integer=False, schema={"type": "number", "exclusiveMinimum": 0, "maximum": 86400}),
        Field(description="End after this many seconds"),
    ] = None


class EventsHeaders(BaseModel):
    model_config = QUERY
    last_event_id: Annotated[Seq, Field(alias="Last-Event-ID", description="The last seq seen")] = None


# -- the route table -----------------------------------------------------------------------------------

SETTLED = "The turn ran on and ended, or (status suspended) still waits on another call of the same step"
OPERATIONS = [
    Op(
        "post",
        f"{SESSION_PATH}/turns",
        "startTurn",
        "Start a turn",
        "With `Accept: text/event-stream`: the turn's events as SSE until its terminal "
        "event (turn.completed, turn.failed, turn.cancelled or input.requested). "
        "Otherwise waits (bounded by JUNE_API_WAIT_SECONDS) and answers 200 with the "
        "ended turn, or 202 with the turn id if it has not ended; `?wait=false` "
        "answers 202 at once. `replace` cancels the session's unfinished turns first.",
        query=StartTurnQuery,
        body={"application/json": StartTurn, "multipart/form-data": TurnForm},
        responses={
            "200": Reply(
                "The turn ended (completed, failed, cancelled) or parked (suspended)",
                {"application/json": Turn, **SSE},
            ),
            "202": returns("Queued or still running", Queued),
        },
        errors=(*COMMON, "409", "413", "415", "429"),
    ),
    Op(
        "get",
        f"{SESSION_PATH}/turns/{{turn_id}}",
        "getTurn",
        "A turn: status, result, error, pending request, usage",
        responses={"200": returns("The turn", Turn)},
    ),
    Op(
        "post",
        f"{SESSION_PATH}/turns/{{turn_id}}/resume",
        "resumeTurn",
        "Answer the turn's parked request",
        body={"application/json": Answer},
        responses={"200": returns(SETTLED, Turn), "202": returns("Accepted: the turn is queued again", Turn)},
        errors=(*COMMON, "409", "413", "422", "500"),
    ),
    Op(
        "post",
        f"{SESSION_PATH}/turns/{{turn_id}}/cancel",
        "cancelTurn",
        "Cancel a queued or running turn",
        "A queued turn is cancelled at once (200); a running one at its next "
        "checkpoint (202). A parked or finished turn: 409.",
        body={"application/json": Nothing},
        body_required=False,
        responses={"200": returns("Cancelled", Turn), "202": returns("Cancel requested", Turn)},
        errors=(*COMMON, "409", "413"),
    ),
    Op(
        "post",
        f"{SESSION_PATH}/reset",
        "resetSession",
        "Archive the session and start afresh",
        body={"application/json": Nothing},
        body_required=False,
        responses={"200": returns("Archived", Archived)},
        errors=(*COMMON, "413"),
    ),
    Op(
        "get",
        f"{SESSION_PATH}/pending",
        "listPending",
        "The session's parked requests",
        responses={"200": returns("Parked requests", PendingList)},
    ),
    Op(
        "get",
        f"{SESSION_PATH}/events",
        "streamEvents",
        "The session's event log as SSE, then live",
        "Replays the live generation's events after `Last-Event-ID` (header, wins) or "
        "`?after=`, then streams live. Reconnect with the last id seen: nothing is "
        "missed or repeated. Long-lived by default, with keep-alive comments.",
        query=EventsQuery,
        headers=EventsHeaders,
        responses={"200": Reply("An event stream", SSE)},
    ),
]
