"""The front-end protocols' part of the OpenAPI document (``openapi.document`` merges it): the AI
SDK's chat transport (``uimessage_stream``) and the AG-UI agent endpoint (``agui_stream``).
Their bodies and events are the protocols' own (docs/frontends.md names the versions); the
document says their outline and June's errors."""

from __future__ import annotations

from typing import Any

from sessions_app import services, wiring
from sessions_app.web.openapi_parts import (
    COMMON,
    ERROR,
    NO_BODY,
    anchored,
    body,
    errors,
    param,
    returns,
)

CHAT_PATH = "/api/agents/{agent}/chat"
AGUI_PATH = "/api/agents/{agent}/agui"


def _agent() -> dict[str, Any]:
    return param("agent", "A deployed agent (e.g. `ops`)", {"type": "string", "enum": sorted(wiring.agents())})


def _chat() -> dict[str, Any]:
    return param(
        "session",
        "The chat id: a June session key (1-200 of letters, digits and `_ . : @ -`)",
        {"type": "string", "minLength": 1, "maxLength": 200, "pattern": anchored(services.SESSION_KEY_RE)},
    )


#: one chunk of the AI SDK's UI message stream (``data: <chunk>``; the stream ends with ``data: [DONE]``)
UI_STREAM = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "One server-sent event: `data` is a UI message chunk (JSON with its `type`: start, "
            "start-step, text-start/delta/end, reasoning-start/delta/end, tool-input-start/delta/available, "
            "tool-output-available/error, tool-approval-request/response, data-june-input, data-june-turn, "
            "finish-step, finish, error, abort), or `[DONE]` last. Header `x-vercel-ai-ui-message-stream: v1`.",
            "required": ["data"],
            "properties": {"data": {"type": "string"}},
        }
    }
}
UI_MESSAGE = {
    "type": "object",
    "required": ["role", "parts"],
    "properties": {
        "id": {"type": "string"},
        "role": {"type": "string", "enum": ["user", "assistant"]},
        "parts": {"type": "array", "maxItems": 200, "items": {"type": "object"}},
    },
}
CHAT_BODY = {
    "type": "object",
    "description": "The hook's body; fields a transport adds besides these (its `body` option, "
    "assistant-ui's) are ignored",
    "required": ["id", "messages"],
    "properties": {
        "id": {"type": "string", "pattern": anchored(services.SESSION_KEY_RE), "description": "The chat id"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "object"},
            "description": "The hook's UI messages; only the last is read (June keeps the conversation): "
            "a person's (text and file parts) or the assistant's (tool parts answering approvals)",
        },
        "trigger": {"type": "string", "enum": ["submit-message", "regenerate-message"]},
        "messageId": {"type": "string"},
    },
}
AGUI_BODY = {
    "type": "object",
    "required": ["threadId", "runId", "messages"],
    "description": "AG-UI's RunAgentInput (protocol 1.0): `threadId` is the session key; the last user "
    "message starts a turn, `resume` answers the interrupts a run ended with",
    "properties": {
        "threadId": {"type": "string", "pattern": anchored(services.SESSION_KEY_RE)},
        "runId": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "resume": {"type": "array", "items": {"type": "object"}},
    },
}
AGUI_STREAM = {
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "One server-sent event: `data` is an AG-UI event (RUN_STARTED, TEXT_MESSAGE_START/"
            "CONTENT/END, REASONING_*, TOOL_CALL_START/ARGS/END/RESULT, STATE_SNAPSHOT, RUN_FINISHED "
            "(outcome success, interrupt or cancelled), RUN_ERROR)",
            "required": ["data"],
            "properties": {"data": {"type": "string"}},
        }
    }
}


def frontend_paths() -> dict[str, Any]:
    return {
        AGUI_PATH: {
            "parameters": [_agent()],
            "post": {
                "operationId": "aguiRun",
                "summary": "An AG-UI run: a turn, an answer to its interrupts, or a reattach to it",
                "description": "AG-UI 1.0's `RunAgentInput`: the last user message starts a turn; `resume` "
                "answers the interrupts a run ended with (403, 409, 422 as every answer); neither: "
                "the thread's unsettled turn replayed from the event log (409 when none). 501 when "
                "the site lacks the `agui` extra.",
                "requestBody": body(AGUI_BODY),
                "responses": {
                    "200": {"description": "The run's AG-UI events", "content": AGUI_STREAM},
                    **errors(*COMMON, "409", "413", "422", "429"),
                    "501": {
                        "description": "The ag-ui-protocol package is not installed (the `agui` extra)",
                        "content": {"application/json": {"schema": ERROR}},
                    },
                },
            },
        },
        CHAT_PATH: {
            "parameters": [_agent()],
            "post": {
                "operationId": "uiChat",
                "summary": "The AI SDK chat transport: start, continue (approvals) or regenerate a turn",
                "description": "`useChat` with `DefaultChatTransport({ api })`. A person's last message starts a "
                "turn; the assistant's, with tool parts in `approval-responded`, answers the parked "
                "turn (403, 409, 422 as every answer); `regenerate-message` regenerates (a branch). "
                "Answers with the UI message stream of that turn.",
                "requestBody": body(CHAT_BODY),
                "responses": {
                    "200": {"description": "The turn's UI message stream", "content": UI_STREAM},
                    **errors(*COMMON, "409", "413", "415", "422", "429"),
                },
            },
        },
        f"{CHAT_PATH}/{{session}}/stream": {
            "parameters": [_agent(), _chat()],
            "get": {
                "operationId": "uiChatResume",
                "summary": "Resume: the chat's unsettled turn replayed from the event log, then live",
                "responses": {
                    "200": {"description": "The turn's UI message stream, from its start", "content": UI_STREAM},
                    "204": {"description": "No turn is queued, running or parked"},
                    **errors(*COMMON),
                },
            },
        },
        f"{CHAT_PATH}/{{session}}/cancel": {
            "parameters": [_agent(), _chat()],
            "post": {
                "operationId": "uiChatCancel",
                "summary": "Stop: cancel the chat's queued or running turn",
                "requestBody": NO_BODY,
                "responses": {
                    "200": returns("The turn, cancelled (or stopping at its next checkpoint)", {"type": "object"}),
                    "204": {"description": "Nothing was running"},
                    **errors(*COMMON, "409"),
                },
            },
        },
        f"{CHAT_PATH}/{{session}}/messages": {
            "parameters": [_agent(), _chat()],
            "get": {
                "operationId": "uiChatMessages",
                "summary": "The chat's live branch as UI messages",
                "responses": {
                    "200": returns(
                        "The messages (none for a chat not started)",
                        {
                            "type": "object",
                            "required": ["messages"],
                            "properties": {"messages": {"type": "array", "items": UI_MESSAGE}},
                        },
                    ),
                    **errors(*COMMON),
                },
            },
        },
    }
