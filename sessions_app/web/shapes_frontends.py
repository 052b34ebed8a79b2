"""The front-end protocols over HTTP: the AI SDK's chat transport (``uimessage_stream``) and the
AG-UI agent endpoint (``agui_stream``) — their shapes and their rows of the route table.

Their bodies' insides and their events are the protocols' own (docs/frontends.md names the
versions): the shapes here say the outline a view checks first and June's errors; the messages
are read by the view (``_parse``, ``_user_input``) and AG-UI's by its package's model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from typing_extensions import NotRequired, TypedDict

from sessions_app import services
from sessions_app.web.apispec import COMMON, Op, Reply, refusal, returns
from sessions_app.web.inputs import BODY
from sessions_app.web.shapes_common import AgentPath, SessionKey, Turn, anchored
from sessions_app.web.shapes_turns import Nothing

CHAT_PATH = "/api/agents/{agent}/chat"
AGUI_PATH = "/api/agents/{agent}/agui"
#: a session key in a body (``services.validate_session_key`` checks it: 400)
KEY = {"type": "string", "pattern": anchored(services.SESSION_KEY_RE)}


class ChatPath(AgentPath):
    session: Annotated[
        SessionKey, Field(description="The chat id: a June session key (1-200 of letters, digits and `_ . : @ -`)")
    ]


class Chat(BaseModel):
    """The hook's body; fields a transport adds besides these (its `body` option, assistant-ui's) are
    ignored"""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: Annotated[str, WithJsonSchema({**KEY, "description": "The chat id"})]
    messages: Annotated[
        list[dict[str, Any]],
        Field(
            min_length=1,
            description="The hook's UI messages; only the last is read (June keeps the conversation): a "
            "person's (text and file parts) or the assistant's (tool parts answering approvals)",
        ),
    ]
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = None


class AguiRunInput(BaseModel):
    """AG-UI's RunAgentInput (protocol 1.0): `threadId` is the session key; the last user message
    starts a turn, `resume` answers the interrupts a run ended with"""

    model_config = BODY
    threadId: Annotated[str, WithJsonSchema(KEY)]
    runId: str
    messages: list[dict[str, Any]]
    resume: list[dict[str, Any]] | None = None
    protocolVersion: str | None = None
    parentRunId: str | None = None
    state: Any = None
    tools: list[Any] | None = None
    context: list[Any] | None = None
    forwardedProps: Any = None


def _stream(description: str) -> dict[str, Any]:
    """One server-sent event whose ``data`` is the protocol's JSON."""
    return {
        "text/event-stream": Annotated[
            dict[str, Any],
            WithJsonSchema(
                {
                    "type": "object",
                    "description": description,
                    "required": ["data"],
                    "properties": {"data": {"type": "string"}},
                }
            ),
        ]
    }


UI_STREAM = _stream(
    "One server-sent event: `data` is a UI message chunk (JSON with its `type`: start, start-step, "
    "text-start/delta/end, reasoning-start/delta/end, tool-input-start/delta/available, "
    "tool-output-available/error, tool-approval-request/response, data-june-input, data-june-turn, "
    "finish-step, finish, error, abort), or `[DONE]` last. Header `x-vercel-ai-ui-message-stream: v1`."
)
AGUI_STREAM = _stream(
    "One server-sent event: `data` is an AG-UI event (RUN_STARTED, TEXT_MESSAGE_START/CONTENT/END, "
    "REASONING_*, TOOL_CALL_START/ARGS/END/RESULT, STATE_SNAPSHOT, RUN_FINISHED (outcome success, "
    "interrupt or cancelled), RUN_ERROR)"
)


class UIMessage(TypedDict):
    id: NotRequired[str]
    role: Literal["user", "assistant"]
    parts: Annotated[list[dict[str, Any]], Field(max_length=200)]


class UIMessages(TypedDict):
    messages: list[UIMessage]


OPERATIONS = [
    Op(
        "post",
        AGUI_PATH,
        "aguiRun",
        "An AG-UI run: a turn, an answer to its interrupts, or a reattach to it",
        "AG-UI 1.0's `RunAgentInput`: the last user message starts a turn; `resume` "
        "answers the interrupts a run ended with (403, 409, 422 as every answer); neither: "
        "the thread's unsettled turn replayed from the event log (409 when none). 501 when "
        "the site lacks the `agui` extra.",
        body={"application/json": AguiRunInput},
        responses={
            "200": Reply("The run's AG-UI events", AGUI_STREAM),
            "501": refusal("The ag-ui-protocol package is not installed (the `agui` extra)"),
        },
        errors=(*COMMON, "409", "413", "422", "429"),
    ),
    Op(
        "post",
        CHAT_PATH,
        "uiChat",
        "The AI SDK chat transport: start, continue (approvals) or regenerate a turn",
        "`useChat` with `DefaultChatTransport({ api })`. A person's last message starts a "
        "turn; the assistant's, with tool parts in `approval-responded`, answers the parked "
        "turn (403, 409, 422 as every answer); `regenerate-message` regenerates (a branch). "
        "Answers with the UI message stream of that turn.",
        body={"application/json": Chat},
        responses={"200": Reply("The turn's UI message stream", UI_STREAM)},
        errors=(*COMMON, "409", "413", "415", "422", "429"),
    ),
    Op(
        "get",
        f"{CHAT_PATH}/{{session}}/stream",
        "uiChatResume",
        "Resume: the chat's unsettled turn replayed from the event log, then live",
        path_params=ChatPath,
        responses={
            "200": Reply("The turn's UI message stream, from its start", UI_STREAM),
            "204": Reply("No turn is queued, running or parked"),
        },
    ),
    Op(
        "post",
        f"{CHAT_PATH}/{{session}}/cancel",
        "uiChatCancel",
        "Stop: cancel the chat's queued or running turn",
        path_params=ChatPath,
        body={"application/json": Nothing},
        body_required=False,
        responses={
            "200": returns("The turn, cancelled (or stopping at its next checkpoint)", Turn),
            "204": Reply("Nothing was running"),
        },
        errors=(*COMMON, "409"),
    ),
    Op(
        "get",
        f"{CHAT_PATH}/{{session}}/messages",
        "uiChatMessages",
        "The chat's live branch as UI messages",
        path_params=ChatPath,
        responses={"200": returns("The messages (none for a chat not started)", UIMessages)},
    ),
]
