"""A conversation (one generation of a session) as a download: JSON and Markdown.

The JSON keeps what a message holds that a reader or a program needs: role, text, the tool
calls an assistant message made, a tool message's result, the turn that wrote it and when.
The Markdown is the same read as a transcript. Both are built from the message log only (one
query, bounded by ``MAX_MESSAGES``; a longer generation says it was cut); who may download is
the caller's check (the owner in the chat, staff in the admin).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.http import HttpResponse
from django.utils import timezone

from sessions_app import models as m

#: messages exported at most from one generation (``truncated`` says when there were more)
MAX_MESSAGES = 10_000
FORMATS = {"md": "text/markdown; charset=utf-8", "json": "application/json"}
ROLE_HEADINGS = {
    "user": "User",
    "trigger": "Trigger",
    "assistant": "Assistant",
    "tool": "Tool result",
    "summary": "Summary of the conversation before",
}


def _message(row: m.Message) -> dict[str, Any]:
    data = row.data if isinstance(row.data, dict) else {}
    out: dict[str, Any] = {
        "index": row.index,
        "role": row.role,
        "turn_id": data.get("turn_id") or row.turn_id,
        "created_at": row.created_at.isoformat() if row.created_at else None,
        "text": str(data.get("text") or ""),
    }
    if row.role == "assistant":
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c.get("name"), "input": c.get("input")}
            for c in data.get("tool_calls", ())
            if isinstance(c, dict)
        ]
    if row.role == "tool":
        result = data.get("result")
        out.update(
            call_id=data.get("call_id"),
            name=data.get("name"),
            result=result,
            is_error=bool(data.get("is_error")) or (isinstance(result, dict) and "error" in result),
        )
    return out


def _first_words(rows: list[m.Message]) -> str:
    """The generation's first message, its first line cut at 60 characters: what it is about."""
    first = next((r for r in rows if r.role in ("user", "trigger")), None)
    line = " ".join(str((first.data or {}).get("text") or "").split()) if first else ""
    return line if len(line) <= 60 else line[:59].rsplit(" ", 1)[0] + "…"


def conversation(*, session: m.Session, generation: int, title: str = "") -> dict[str, Any]:
    """The generation as the JSON export: its session, whether it is live, its messages in order."""
    rows = list(
        m.Message.objects.filter(session=session, generation=generation)
        .order_by("index")
        .only("index", "role", "turn_id", "data", "created_at")[: MAX_MESSAGES + 1]
    )
    return {
        "agent": session.agent,
        "session": session.key,
        "title": title or session.title or _first_words(rows) or session.key,
        "generation": generation,
        "live": generation == session.generation,
        "exported_at": timezone.now().isoformat(),
        "truncated": len(rows) > MAX_MESSAGES,
        "messages": [_message(r) for r in rows[:MAX_MESSAGES]],
    }


def filename(doc: dict[str, Any], fmt: str) -> str:
    """``<agent>-<key>-g<generation>.<fmt>``: a key is letters, digits and ``_ . : @ -``; the
    colon and the at sign are not for file names."""
    stem = f"{doc['agent']}-{doc['session']}-g{doc['generation']}"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in stem) + f".{fmt}"


def as_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str)


def _fence(text: str, info: str = "") -> str:
    """A fenced block longer than any backtick run inside it (so no content closes it)."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}"


def as_markdown(doc: dict[str, Any]) -> str:
    """A readable transcript: a heading per message (who, when), the text as written, tool calls
    and results as JSON blocks."""
    state = "live" if doc["live"] else "archived"
    about = (
        f"Agent `{doc['agent']}`, session `{doc['session']}`, generation {doc['generation']} ({state}); "
        f"exported {doc['exported_at']}."
    )
    lines = [f"# {doc['title']}", "", about, ""]
    if doc["truncated"]:
        lines += [f"*Only the first {MAX_MESSAGES} messages are exported.*", ""]
    for msg in doc["messages"]:
        heading = ROLE_HEADINGS.get(msg["role"], msg["role"])
        if msg["role"] == "tool":
            heading += f" · {msg.get('name') or ''}" + (" (error)" if msg.get("is_error") else "")
        lines += [f"## {heading} · #{msg['index']} · {msg['created_at'] or ''}", ""]
        if msg["text"]:
            lines += [msg["text"], ""]
        for call in msg.get("tool_calls", ()):
            lines += [
                f"Calls `{call['name']}`:",
                "",
                _fence(json.dumps(call["input"], indent=2, ensure_ascii=False, default=str), "json"),
                "",
            ]
        if msg["role"] == "tool":
            lines += [_fence(json.dumps(msg["result"], indent=2, ensure_ascii=False, default=str), "json"), ""]
    return "\n".join(lines).rstrip() + "\n"


def render(doc: dict[str, Any], fmt: str) -> str:
    return as_markdown(doc) if fmt == "md" else as_json(doc)


def download(session: m.Session, generation: int, fmt: str, *, title: str = "") -> HttpResponse:
    """The generation as an attachment in ``fmt`` (``md`` or ``json``)."""
    doc = conversation(session=session, generation=generation, title=title)
    response = HttpResponse(render(doc, fmt), content_type=FORMATS[fmt])
    response["Content-Disposition"] = f'attachment; filename="{filename(doc, fmt)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
