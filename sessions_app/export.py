"""A conversation (one generation of a session) as a download: JSON and Markdown.

The JSON keeps what a message holds that a reader or a program needs: role, text, the files
attached to it (name, type, size, pages and the URL its owner downloads it from), the tool
calls an assistant message made, a tool message's result, the turn that wrote it and when.
The Markdown is the same read as a transcript. Both are built from the message log only (one
query, bounded by ``MAX_MESSAGES``; a longer generation says it was cut); who may download is
the caller's check (the owner in the chat, staff in the admin).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from agents_app import attachments as files
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


def _attachment(session: m.Session, meta: dict[str, Any], request: HttpRequest | None) -> dict[str, Any]:
    """An attached file as exported: its metadata and the URL its owner (or staff) downloads it
    from, absolute when the export answers a request."""
    try:
        url = reverse(
            "june_api:attachment",
            kwargs={"agent": session.agent, "session": session.key, "attachment_id": str(meta.get("id") or "")},
        )
    except NoReverseMatch:  # not an id (a damaged row): listed without a link
        url = ""
    if url and request is not None:
        url = request.build_absolute_uri(url)
    keep = ("id", "name", "type", "size", "pages")
    return {**{k: meta.get(k) for k in keep}, "url": url}


def _message(row: m.Message, session: m.Session, request: HttpRequest | None = None) -> dict[str, Any]:
    data = row.data if isinstance(row.data, dict) else {}
    out: dict[str, Any] = {
        "index": row.index,
        "role": row.role,
        "turn_id": data.get("turn_id") or row.turn_id,
        "created_at": row.created_at.isoformat() if row.created_at else None,
        "text": str(data.get("text") or ""),
    }
    by = str(data.get("by") or "")
    if by and row.role in ("trigger", "assistant"):  # a schedule's, a takeover's note, a person's reply
        out["by"] = by
    attached = [a for a in data.get("attachments") or () if isinstance(a, dict)]
    if attached:
        out["attachments"] = [_attachment(session, a, request) for a in attached]
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


def conversation(
    *, session: m.Session, generation: int, title: str = "", request: HttpRequest | None = None
) -> dict[str, Any]:
    """The generation as the JSON export: its session, whether it is live, its messages in order
    (``request``: attachments' links are absolute)."""
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
        "messages": [_message(r, session, request) for r in rows[:MAX_MESSAGES]],
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


def _link(meta: dict[str, Any]) -> str:
    """``[name](<url>)``: brackets and backslashes in a file's name escaped, so a name cannot end
    the link or start one of its own."""
    name = re.sub(r"([\\\[\]`*_<>])", r"\\\1", str(meta.get("name") or "file"))
    return f"[{name}](<{meta['url']}>)" if meta.get("url") else name


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
        by, text = str(msg.get("by") or ""), msg["text"]
        if by == m.NOTE_BY:  # a takeover's note: the chat's words, not the model's
            heading, text = "Takeover", m.note_for_people(text)
        elif by.startswith(m.PERSON_PREFIX):
            heading = f"{by.removeprefix(m.PERSON_PREFIX)} (a person)"
        if msg["role"] == "tool":
            heading += f" · {msg.get('name') or ''}" + (" (error)" if msg.get("is_error") else "")
        lines += [f"## {heading} · #{msg['index']} · {msg['created_at'] or ''}", ""]
        if text:
            lines += [text, ""]
        for meta in msg.get("attachments", ()):
            # "report.pdf (application/pdf, 3 pages, 45,678 bytes)", the name as a link
            details = files.describe({**meta, "name": ""})
            lines.append(f"- Attached: {_link(meta)}{details}")
        if msg.get("attachments"):
            lines.append("")
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


def download(
    session: m.Session, generation: int, fmt: str, *, title: str = "", request: HttpRequest | None = None
) -> HttpResponse:
    """The generation as an attachment in ``fmt`` (``md`` or ``json``)."""
    doc = conversation(session=session, generation=generation, title=title, request=request)
    response = HttpResponse(render(doc, fmt), content_type=FORMATS[fmt])
    response["Content-Disposition"] = f'attachment; filename="{filename(doc, fmt)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
