"""A transcript as the Messages API's ``messages``: roles, content blocks (attachments as image
and document blocks, ``anthropic_files``), and consecutive same-role messages merged. Pure:
no SDK import, tested by table. ``tools_of``: the request's tool definitions, made once per set of specs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agents_app.providers.anthropic_files import Reader, attachment_blocks
from agents_app.providers.prompt_cache import tools_chars
from agents_app.runtime.compaction import SUMMARY_PREFIX
from agents_app.runtime.messages import Message, Role
from agents_app.runtime.model import ToolSpec

#: the ``by`` of an assistant message a person wrote (the host's takeover)
PERSON = "person:"


def _api_content(message: Message, read: Reader | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The API role and content blocks of one transcript message."""
    if message.role in (Role.USER, Role.TRIGGER):
        # a trigger (proactive seed) reads to the model as an ordinary user message; attachments
        # go before the text, as the API's guide advises for images and documents
        return "user", attachment_blocks(message, read) + (
            [{"type": "text", "text": message.text}] if message.text else []
        )
    if message.role == Role.SUMMARY:
        # a compaction's summary reads as user text (merged with a user message after it)
        return "user", [{"type": "text", "text": SUMMARY_PREFIX + message.text}]
    if message.role == Role.ASSISTANT:
        if (message.by or "").startswith(PERSON) and message.text:
            # a person's reply while they had the session (a takeover): the model reads whose
            return "assistant", [
                {"type": "text", "text": f"[{message.by[len(PERSON) :]}, a person, wrote:] {message.text}"}
            ]
        if message.blocks:
            return "assistant", [dict(b) for b in message.blocks]
        content: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in message.tool_calls]
        return "assistant", content
    if message.role == Role.TOOL:
        result = message.result if isinstance(message.result, str) else json.dumps(message.result)
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.call_id, "content": result}
        if message.is_error:
            block["is_error"] = True
        return "user", [block]
    raise ValueError(f"unknown role {message.role!r}")


def build_messages(transcript: Iterable[Message], read: Reader | None = None) -> list[dict[str, Any]]:
    """Transcript → API ``messages``. ``read(id)`` gives an attachment's bytes (None: gone).

    Consecutive messages of the same API role are merged into one (the API requires the roles
    to alternate: all tool results after one assistant message become one user message).
    Messages with no content (an empty assistant reply) are skipped. Nothing is prepended if
    the transcript starts with an assistant message: the API will reject it, which is the
    engine's bug to see, not ours to paper over.
    """
    out: list[dict[str, Any]] = []
    for message in transcript:
        role, content = _api_content(message, read)
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    return out


#: a request's ``tools`` and their ``tools_chars`` by the identities of the specs they show (an
#: agent's specs are the same objects turn after turn; an entry holds them, so no id is reused)
_TOOLS: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], list[dict[str, Any]], int]] = {}
_TOOLS_MAX = 256


def tools_of(specs: tuple[ToolSpec, ...]) -> tuple[list[dict[str, Any]], int]:
    """The request's ``tools`` for ``specs`` (a list of its own) and their ``tools_chars``
    (``prompt_cache``): worked out once for the same specs, not at every model call."""
    key = tuple(map(id, specs))
    known = _TOOLS.get(key)
    if known is None:
        if len(_TOOLS) >= _TOOLS_MAX:
            _TOOLS.clear()
        tools = [t.to_json() for t in specs]
        known = _TOOLS[key] = (specs, tools, tools_chars(tools))
    return list(known[1]), known[2]
