"""Compaction: a session's live transcript stays inside its model's context window.

The message log keeps every message. What the model sees is the **view**: the session's live
summary (a ``summary`` message, if there is one) followed by every other non-summary message
from the session's **boundary** on. A compaction summarizes the older part of the view with one
call to the agent's model, appends the summary to the log and moves the boundary; the loop
commits both in one checkpoint (``compact:<n>``, ``n`` the summary's position).

Everything here is pure: the boundary is chosen from the view (``select_boundary``), the
summarizing request is built from plain messages (``summary_request``), and whether a compaction
is due is a function of the transcript (``proactive_due``, ``reactive_count``), so a replay after
a crash decides exactly what the first attempt decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .errors import AgentConfigError
from .messages import Message, Role
from .model import ModelRequest

DEFAULT_INSTRUCTION = (
    "You maintain the memory of a long conversation between a user and an AI assistant. "
    "Summarize the conversation below so the assistant can carry on without it: the user's "
    "goals and preferences, facts and decisions established, what tools were used and what "
    "they returned that still matters, open questions and promised follow-ups. Keep names, "
    "numbers and identifiers exact. If the conversation starts with an earlier summary, fold "
    "it in. Answer with the summary only, as plain text."
)

#: the first line of a summary as the model reads it (a user message: the API has no other place)
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
#: longest rendering of one tool input or result in the summarizer's request
ITEM_CHARS = 1_000
#: the summarizer's request is cut to this share of the window (it must leave room to answer)
REQUEST_SHARE = 0.5
#: without a known window, the summarizer's request is cut at this many characters
FALLBACK_CHARS = 400_000


def estimate_tokens(text_chars: int) -> int:
    """Tokens as characters / 4: the estimate used before a provider reports usage."""
    return text_chars // 4


@dataclass(frozen=True, slots=True)
class Compaction:
    """An agent's compaction settings (``compaction = {...}`` or ``False`` in ``agent.py``).

    ``threshold``: share of the context window that the last model step's input may reach
    before a settled turn compacts; ``keep_last``: most recent exchanges (a user or trigger
    message and what followed it, the current one included) kept verbatim; ``context_window``:
    tokens, else the model's own ``context_window``; ``instruction``: the summarizer's system
    prompt; ``max_reactive``: compactions a model step may ask for before the turn fails.
    """

    enabled: bool = True
    threshold: float = 0.75
    keep_last: int = 2
    instruction: str = DEFAULT_INSTRUCTION
    context_window: int | None = None
    max_reactive: int = 2

    def window(self, model: Any) -> int | None:
        return self.context_window or getattr(model, "context_window", None)


_KEYS = frozenset({"enabled", "threshold", "keep_last", "instruction", "context_window", "max_reactive"})


def compaction_config(value: Any) -> Compaction:
    """``agent.py``'s ``compaction`` as a :class:`Compaction`: ``False`` turns it off, ``True``
    or ``None`` is the default, a dict sets fields (an unknown key is an error)."""
    if isinstance(value, Compaction):
        return value
    if value is None or value is True:
        return Compaction()
    if value is False:
        return Compaction(enabled=False)
    if not isinstance(value, dict):
        raise AgentConfigError(f"compaction must be a dict, True or False, not {value!r}")
    unknown = set(value) - _KEYS
    if unknown:
        raise AgentConfigError(f"unknown compaction settings: {', '.join(sorted(unknown))}")
    config = Compaction(**value)
    if not 0 < config.threshold <= 1:
        raise AgentConfigError(f"compaction threshold must be in (0, 1], not {config.threshold!r}")
    if not isinstance(config.keep_last, int) or config.keep_last < 1:
        raise AgentConfigError(f"compaction keep_last must be an integer >= 1, not {config.keep_last!r}")
    if not config.instruction.strip():
        raise AgentConfigError("compaction instruction must not be empty")
    return config


# --- the view --------------------------------------------------------------------------------

View = Sequence[tuple[int, Message]]


def live_view(
    transcript: Sequence[Message], base: int, boundary: int, summary: int | None
) -> list[tuple[int, Message]]:
    """(position, message) of what the model sees: the live summary, then every non-summary
    message from ``boundary`` on. ``transcript[0]`` is at position ``base`` (<= boundary)."""
    head = [(summary, transcript[summary - base])] if summary is not None else []
    start = max(boundary - base, 0)
    return head + [(base + i, m) for i, m in enumerate(transcript[start:], start) if m.role != Role.SUMMARY]


def _owed_from(view: View) -> int:
    """View index of the last assistant message if some of its calls have no result yet (a
    parked or in-flight request: it must stay verbatim), else len(view)."""
    for k in range(len(view) - 1, -1, -1):
        message = view[k][1]
        if message.role == Role.ASSISTANT:
            answered = {m.call_id for _, m in view[k + 1 :] if m.role == Role.TOOL}
            return k if any(c.id not in answered for c in message.tool_calls) else len(view)
    return len(view)


def select_boundary(view: View, *, keep_last: int) -> int | None:
    """The view index where the kept part begins (the summarized part is ``view[:k]``), or None
    when there is nothing to summarize.

    With ``keep_last >= 1`` the cut is at the start of the ``keep_last``-th most recent exchange
    (a user or trigger message): the cut never lands on a tool result, so a call and its result
    stay on one side. ``keep_last=0`` (the second try after an overflow) cuts as late as it
    can: at the last assistant message (its thinking and tool_use blocks kept as they are, its
    results after it), or else at the last exchange's start. Never past an assistant message
    whose calls are still owed a result, and never a cut that would summarize nothing but the
    previous summary.
    """
    limit = _owed_from(view)
    starts = [k for k, (_, m) in enumerate(view) if m.role in (Role.USER, Role.TRIGGER) and k <= limit]
    if keep_last >= 1:
        candidates = starts[-keep_last:][:1] if len(starts) >= keep_last else []
    else:
        assistants = [k for k, (_, m) in enumerate(view) if m.role == Role.ASSISTANT and k <= limit]
        candidates = [max(assistants[-1:] + starts[-1:])] if (assistants or starts) else []
    for k in candidates:
        if any(m.role != Role.SUMMARY for _, m in view[:k]):
            return k
    return None


def transcript_start(boundary: int, steps: Iterable[tuple[str, Any]]) -> int:
    """Where a turn's live transcript starts, from the session's boundary and the turn's
    ``(step id, step data)``: the boundary, or the turn's opening when one of its own
    compactions cut inside it (the ``compact:<n>`` step records ``opening``), since the loop
    reads where it stands off the turn's messages."""
    start = boundary
    for key, data in steps:
        if key.startswith("compact:") and isinstance(data, dict) and "opening" in data:
            start = min(start, int(data["opening"]))
    return start


# --- when ---------------------------------------------------------------------------------


def input_tokens(usage: dict[str, int]) -> int | None:
    """The input size of a model step from its usage (cache reads and writes included)."""
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    if not any(k in usage for k in keys):
        return None
    return sum(int(usage.get(k, 0)) for k in keys)


def _size(message: Message) -> int:
    size = len(message.text)
    if message.tool_calls:
        size += sum(len(_json(c.input)) + len(c.name) for c in message.tool_calls)
    if message.role == Role.TOOL:
        size += len(_json(message.result))
    return size


def view_tokens(system: str, messages: Sequence[Message]) -> int:
    """The estimated input tokens of a request over ``messages`` (characters / 4)."""
    return estimate_tokens(len(system) + sum(_size(m) for m in messages))


def proactive_due(config: Compaction, window: int | None, tail: Sequence[Message], estimate: Callable[[], int]) -> bool:
    """After a settled turn: is the last model step's input (its usage; ``estimate`` when it
    reported none) past the threshold, and not compacted since? ``tail`` is the turn's tail."""
    if not config.enabled or not window:
        return False
    for message in reversed(tail):
        if message.role == Role.SUMMARY:
            return False  # compacted after the last reply already
        if message.role == Role.ASSISTANT:
            tokens = input_tokens(message.usage)
            return (estimate() if tokens is None else tokens) >= config.threshold * window
    return False


def reactive_count(tail: Sequence[Message]) -> int:
    """Compactions made for the model step now due: summaries at the end of the turn's tail."""
    n = 0
    for message in reversed(tail):
        if message.role != Role.SUMMARY:
            break
        n += 1
    return n


# --- the summarizer's request ----------------------------------------------------------------


def _cut(text: str, limit: int = ITEM_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _line(message: Message) -> str:
    if message.role == Role.SUMMARY:
        return SUMMARY_PREFIX + message.text
    if message.role == Role.USER:
        return f"User: {message.text}"
    if message.role == Role.TRIGGER:
        return f"Trigger ({message.by or 'proactive'}): {message.text}"
    if message.role == Role.ASSISTANT:
        # a provider's own compaction block carries a summary of what came before it
        server = [b["content"] for b in message.blocks if b.get("type") == "compaction" and b.get("content")]
        lines = [SUMMARY_PREFIX + s for s in server] + ([f"Assistant: {message.text}"] if message.text else [])
        return "\n\n".join(lines)
    return f"Result of {message.name}: {_cut(_json(message.result))}"


def render(messages: Sequence[Message]) -> list[str]:
    """The summarized part as plain lines: no tool_use or tool_result blocks reach the
    summarizer, and a call that has no result (dangling) or failed is left out with its result,
    so nothing in its request can be refused for pairing or mislead it."""
    lines: list[str] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.role == Role.TOOL:
            continue  # results are rendered with their call, below
        if line := _line(message):
            lines.append(line)
        if message.role != Role.ASSISTANT or not message.tool_calls:
            continue
        results: dict[str, Message] = {}
        while i < len(messages) and messages[i].role == Role.TOOL:
            results.setdefault(messages[i].call_id or "", messages[i])
            i += 1
        for call in message.tool_calls:
            result = results.get(call.id)
            if result is None or result.is_error:
                continue
            lines.append(f"Assistant called {call.name}({_cut(_json(call.input))})")
            lines.append(_line(result))
    return lines


def summary_request(messages: Sequence[Message], config: Compaction, window: int | None) -> ModelRequest:
    """One call to the agent's model: the summarizing instruction as the system prompt (never
    the agent's own prompt or overlay), the summarized part rendered as one user message, and
    no tools (a summarizer offered tools may answer with a call and no text). Cut to fit: the
    oldest lines go first (an earlier summary is kept)."""
    lines = render(messages)
    budget = int(window * 4 * REQUEST_SHARE) if window else FALLBACK_CHARS
    budget -= len(config.instruction)
    keep_head = 1 if lines and lines[0].startswith(SUMMARY_PREFIX) else 0
    head, body = lines[:keep_head], lines[keep_head:]
    size = sum(len(x) + 1 for x in lines)
    dropped = 0
    while body and size > budget:
        size -= len(body[0]) + 1
        body = body[1:]
        dropped += 1
    if dropped:
        body = [f"[… {dropped} earlier lines left out to fit …]"] + body
    head = [_cut(h, max(budget // 2, 200)) for h in head]
    text = "\n\n".join(head + body)
    return ModelRequest(
        system=config.instruction,
        messages=(Message(Role.USER, text=text),),
        tools=(),
        purpose="compact",
    )
