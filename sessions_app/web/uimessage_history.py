"""A session's live branch as the AI SDK's UI messages (``GET …/chat/<id>/messages``), so a
``useChat`` front end keeps no store of its own.

One user message per turn a person opened (id ``<turn id>-user``: its text, its files as file
parts linking to the attachment API) and one assistant message per turn (id: the turn id, as
its stream names it): thinking blocks as reasoning parts, text parts, and each tool call a
``dynamic-tool`` part whose state is where the call stands (``output-available``,
``output-error``, ``approval-requested`` while the turn is parked on its approval).
Summaries and proactive seeds are not a person's messages: they are left out."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from agents_app.runtime import rules
from agents_app.runtime.seams import TurnStatus
from sessions_app import models as m
from sessions_app.web.turn_follow import unsettled_turn

#: the most messages one history answer holds (the newest; the chat UI shows no more either)
MAX_ROWS = 2000


def _file_part(session: m.Session, meta: dict[str, Any]) -> dict[str, Any]:
    url = reverse(
        "june_api:attachment", kwargs={"agent": session.agent, "session": session.key, "attachment_id": meta.get("id")}
    )
    return {"type": "file", "mediaType": str(meta.get("type") or ""), "filename": meta.get("name"), "url": url}


def _parked_calls(session: m.Session) -> dict[str, str]:
    """call id → approval id, for the tool approvals the session's turn is parked on."""
    turn = unsettled_turn(session)
    if turn is None or turn.status != TurnStatus.SUSPENDED:
        return {}
    out = {}
    for request in rules.pending_requests(turn.pending):
        input_id = str(request.get("id") or "")
        if request.get("kind") == "tool_approval" and input_id.startswith("approve:"):
            out[input_id[len("approve:") :]] = input_id
    return out


def ui_messages(session: m.Session) -> list[dict[str, Any]]:
    rows = list(
        m.Message.objects.filter(session=session, generation=session.generation)
        .order_by("-index")
        .only("index", "turn_id", "role", "data")[:MAX_ROWS]
    )[::-1]
    parked = _parked_calls(session)
    out: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None
    tools: dict[str, dict[str, Any]] = {}
    for row in rows:
        data, turn_id = row.data or {}, str(row.turn_id or "")
        if row.role == "user":
            parts: list[dict[str, Any]] = [{"type": "text", "text": str(data.get("text") or "")}]
            parts += [_file_part(session, a) for a in data.get("attachments", ()) if isinstance(a, dict)]
            out.append({"id": f"{turn_id or row.index}-user", "role": "user", "parts": parts})
            reply = None
        elif row.role == "assistant":
            if reply is None or reply["id"] != turn_id:
                reply = {"id": turn_id or str(row.index), "role": "assistant", "parts": []}
                out.append(reply)
            reply["parts"].append({"type": "step-start"})
            for block in data.get("blocks", ()):
                if isinstance(block, dict) and block.get("type") == "thinking" and block.get("thinking"):
                    reply["parts"].append({"type": "reasoning", "text": str(block["thinking"]), "state": "done"})
            if data.get("text"):
                reply["parts"].append({"type": "text", "text": str(data["text"]), "state": "done"})
            for call in data.get("tool_calls", ()):
                part = {
                    "type": "dynamic-tool",
                    "toolName": call.get("name"),
                    "toolCallId": call.get("id"),
                    "state": "input-available",
                    "input": call.get("input") or {},
                }
                if call.get("id") in parked:
                    part.update(state="approval-requested", approval={"id": parked[call.get("id")]})
                tools[str(call.get("id"))] = part
                reply["parts"].append(part)
        elif row.role == "tool" and (part := tools.get(str(data.get("call_id")))) is not None:
            part.pop("approval", None)
            if data.get("is_error"):
                part.update(state="output-error", errorText=_text(data.get("result")))
            else:
                part.update(state="output-available", output=data.get("result"))
    return out


def _text(result: Any) -> str:
    if isinstance(result, dict) and isinstance(result.get("error"), str):
        return result["error"]
    return result if isinstance(result, str) else str(result)
