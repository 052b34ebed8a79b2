"""The demo model: offline and deterministic, so the embedded default works with no API key.

Its rules (also in ``agents_app/agents/ops/README.md``), read off the last user message:

- ``order [<n>] <item>``         → calls ``create_order`` (sync tool: writes an Order row of n)
- ``stock <item>``               → calls ``lookup_stock`` (async, read-only)
- ``flaky``                      → calls ``flaky`` (raises: shows an error result)
- ``refund order <id> <amount>`` → calls ``issue_refund`` (parks for an operator's approval)
- ``wait <seconds>``             → calls ``wait`` (async, sleeps; try cancel/replace on it)
- ``bulk order <n> <item>``      → calls ``bulk_order``, which needs the speaker's approval
  first (a declared approval: approve, edit the input, or reject); ``bulk order 50 mugs and
  20 pens and 10 cups`` makes three parallel calls in one step, each asking at once
- ``count <item>``, ``reserve <n> <item>`` → the demo MCP server's ``inventory__count`` and
  ``inventory__reserve`` (``JUNE_DEMO_MCP=1``, as ``dev.py run`` sets it)
- ``essay``                      → streams a long answer slowly (try cancel mid-stream)
- ``loop forever``               → keeps calling ``lookup_stock`` (a runaway model): the turn's
  limit ends it (``limits``: its last call may use no tool, and the demo then sums up)
- ``summary``                    → a daily summary (what the ops schedule seeds)
- ``research <a> [and <b> …]``   → calls ``research``: one ``researcher`` child turn per topic
  (subagents, run in parallel); a researcher, given its topic as task data, calls
  ``search_notes`` and answers with the notes (a topic with "secret" in it calls
  ``ask_clearance`` instead: an operator approves it, as a refund)
- a message with attachments     → says what it received: each file's name, type, pages, size
- anything else                  → answers in prose, echoing the message
- instructions that say "ask before ordering" → asks instead of calling ``create_order``

After tool results it answers in prose, describing each result. Text streams in small deltas, a
long reply in at most ``PIECES`` of them (a pasted page comes back in seconds); the essay streams in
small ones throughout, slowly, to be cancelled or reloaded mid-stream.

Its context window is small on purpose (``CONTEXT_WINDOW`` "tokens", counted as characters / 4),
so compaction shows within a dozen messages (``essay`` fills it fast) and the daily summary
session lives forever: past the window it stops with ``context_overflow`` (the engine compacts
and asks again), and a compaction's summarizing call gets a deterministic summary that names
the user's messages it covers.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, AsyncIterator

from agents_app.attachments import describe
from agents_app.runtime.compaction import SUMMARY_PREFIX, view_tokens
from agents_app.runtime.messages import Message, Role, ToolCall
from agents_app.runtime.model import ModelChunk, ModelReply, ModelRequest, StopReason, TextDelta

#: a line of instructions the demo model heeds: it asks before it orders (the evals' demo of a
#: change of instructions that breaks a case, june_evals/demo/)
ASK_FIRST = "ask before ordering"

#: the demo model's context window, in "tokens" of 4 characters
CONTEXT_WINDOW = 1_600

#: the most deltas a reply other than the essay streams in: longer replies come in longer pieces
PIECES = 40

ESSAY = (
    "Durable execution means a turn is a process, not a request. Every step commits as it "
    "finishes: the model's reply with the assistant message, each tool's result with its tool "
    "message. If a worker dies, another one reads the journal and carries on where the database "
    "says the turn stopped, without running a finished step again. A person can answer an "
    "approval days later; a cancel is a row, so it survives a crash too. "
)


TASK = re.compile(r"<task>\n(.*)\n</task>", re.S)


def _bulk_orders(what: str) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for part in re.split(r"\s+and\s+|,", what)[:8]:
        if m := re.match(r"\s*(\d{1,4})\s+(\S.*)", part):
            calls.append(
                ("bulk_order", {"item": m.group(2).strip()[:200], "quantity": min(int(m.group(1)), 1000) or 1})
            )
    return calls


def _rules(text: str) -> tuple[str, dict[str, Any]] | list[tuple[str, dict[str, Any]]] | None:
    """The tool call the message asks for (a list: parallel calls of one step), or None."""
    lowered = text.lower()
    if task := TASK.search(text):  # a child turn's task data (subagents): research it
        goal = task.group(1).strip()[:200]
        if "secret" in goal.lower():
            return "ask_clearance", {"topic": goal}
        return "search_notes", {"query": goal}
    if m := re.match(r"\s*research\s+(.+)", text, re.IGNORECASE | re.S):
        topics = [t.strip()[:200] for t in re.split(r"\s+and\s+|,", m.group(1)) if t.strip()]
        return "research", {"topics": topics[:8]}
    if (m := re.search(r"\bbulk order\s+(\d{1,4}\s+\S.*)", text, re.IGNORECASE)) and (
        orders := _bulk_orders(m.group(1))
    ):
        return orders if len(orders) > 1 else orders[0]
    # the demo MCP server's tools (agents/ops/inventory_server.py, JUNE_DEMO_MCP=1)
    if m := re.match(r"\s*count\s+(\S.*)", text, re.IGNORECASE):
        return "inventory__count", {"item": m.group(1).strip()[:200]}
    if m := re.match(r"\s*reserve\s+(\d{1,4})\s+(\S.*)", text, re.IGNORECASE):
        return "inventory__reserve", {"item": m.group(2).strip()[:200], "quantity": int(m.group(1))}
    if m := re.search(r"refund order\s+(\S+)\s+\$?(\d+(?:\.\d+)?)", lowered):
        return "issue_refund", {"order_id": m.group(1), "amount": float(m.group(2))}
    if m := re.search(r"\border\s+(.+)", text, re.IGNORECASE):
        item = m.group(1).strip()
        if (n := re.match(r"(\d{1,4})\s+(\S.*)", item)) and 1 <= int(n.group(1)) <= 1000:
            return "create_order", {"item": n.group(2)[:200], "quantity": int(n.group(1))}
        return "create_order", {"item": item[:200]}
    if m := re.search(r"\bstock\s+(.+)", text, re.IGNORECASE):
        return "lookup_stock", {"item": m.group(1).strip()[:200]}
    if "flaky" in lowered:
        return "flaky", {}
    if m := re.search(r"\bwait\s+(\d+(?:\.\d+)?)", lowered):
        return "wait", {"seconds": float(m.group(1))}
    return None


def summarize(request: ModelRequest) -> str:
    """A compaction's summary, deterministic: the earlier summary's gist and the user's
    messages it covers (each cut short), never longer than a few hundred characters."""
    text = request.messages[-1].text if request.messages else ""
    said = [line[len("User: ") :] for line in text.split("\n\n") if line.startswith("User: ")]
    seeds = sum(1 for line in text.split("\n\n") if line.startswith("Trigger ("))
    quoted = ", ".join(repr(s[:30] + ("…" if len(s) > 30 else "")) for s in said[-6:])
    parts = ["Earlier in this conversation"]
    if text.startswith(SUMMARY_PREFIX):
        parts.append(" (continuing an earlier summary)")
    parts.append(f": the user sent {len(said)} message{'s' if len(said) != 1 else ''}")
    if quoted:
        parts.append(f" (latest: {quoted})")
    if seeds:
        parts.append(f"; {seeds} scheduled seed{'s' if seeds != 1 else ''} ran")
    parts.append("; the assistant answered each.")
    return "".join(parts)


def received(message: Message) -> str:
    """What the demo says to a message with attachments: what it got (type, pages, size), so
    the offline walk-through shows that the files reached the model."""
    count = len(message.attachments)
    said = f" You said: {message.text}" if message.text.strip() else ""
    return (
        f"I received {count} attachment{'s' if count != 1 else ''}: "
        + "; ".join(describe(a) for a in message.attachments)
        + "."
        + said
    )


def _describe(result: Any) -> str:
    return json.dumps(result, sort_keys=True) if not isinstance(result, str) else result


class DemoModel:
    def __init__(
        self, *, delay: float = 0.01, chunk: int = 6, essay_delay: float = 0.15, context_window: int = CONTEXT_WINDOW
    ) -> None:
        self.delay = delay
        self.chunk = chunk
        self.essay_delay = essay_delay
        self.context_window = context_window

    def _decide(self, request: ModelRequest) -> tuple[str, tuple[ToolCall, ...], float]:
        transcript = request.messages
        last = transcript[-1] if transcript else Message(Role.USER)
        # a call id from the step's position (stable, unique in the session) when it is known
        key = request.stream_key.split(":")
        index = key[2] if len(key) > 2 and key[1] == "model" else str(len(transcript))
        available = {t.name for t in request.tools} if request.tools_allowed else set()
        opening = next((m.text for m in reversed(transcript) if m.role in (Role.USER, Role.TRIGGER)), "")
        if "loop forever" in opening.lower():
            looked = sum(1 for m in transcript if m.role == Role.TOOL and m.name == "lookup_stock")
            if "lookup_stock" in available and (last.role == Role.TOOL or last.text == opening):
                return (
                    f"Looking again ({looked + 1}).",
                    (ToolCall(id=f"call_{index}_0", name="lookup_stock", input={"item": "tea"}),),
                    self.delay,
                )
            if not request.tools_allowed:
                return f"I stopped at this turn's limit after {looked} stock lookups: tea is in stock.", (), self.delay
        if last.role == Role.TOOL and last.name == "search_notes" and isinstance(last.result, dict):
            notes = last.result.get("notes") or []
            return f"Findings on {last.result.get('query')}: " + "; ".join(notes) + ".", (), self.delay
        if last.role == Role.TOOL and last.name == "ask_clearance" and isinstance(last.result, dict):
            verdict = "cleared for release" if last.result.get("cleared") else "withheld by the operator"
            return f"Findings on {last.result.get('topic')}: {verdict}.", (), self.delay
        if last.role == Role.TOOL and last.name == "research":
            found = last.result if isinstance(last.result, list) else [last.result]
            lines = [f"{r.get('topic')}: {r.get('findings') or r.get('error')}" for r in found if isinstance(r, dict)]
            if last.is_error:
                lines = [str((last.result or {}).get("error"))]
            return "Research done. " + " | ".join(lines), (), self.delay
        if last.role == Role.TOOL:
            results = []
            for m in reversed(transcript):
                if m.role != Role.TOOL:
                    break
                results.append(f"{m.name} → {_describe(m.result)}" + (" (error)" if m.is_error else ""))
            return "Done. " + "; ".join(reversed(results)), (), self.delay
        if last.attachments:
            return received(last), (), self.delay
        text = last.text
        if "essay" in text.lower():
            return ESSAY * 3, (), self.essay_delay
        if "summary" in text.lower():
            return "Daily summary: all systems nominal; no open incidents.", (), self.delay
        rule = _rules(text)
        wanted = rule if isinstance(rule, list) else [rule] if rule else []
        if any(name == "create_order" for name, _ in wanted) and ASK_FIRST in request.system.lower():
            return f"Shall I go ahead: {text}? Say yes and I will place it.", (), self.delay
        if wanted and all(name in available for name, _ in wanted):
            calls = tuple(
                ToolCall(id=f"call_{index}_{n}", name=name, input=args) for n, (name, args) in enumerate(wanted)
            )
            return f"Calling {', '.join(c.name for c in calls)}.", calls, self.delay
        return f"You said: {text}", (), self.delay

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        tokens = view_tokens(request.system, request.messages)
        if tokens > self.context_window:
            yield ModelReply(stop_reason=StopReason.CONTEXT_OVERFLOW, usage={"input_tokens": tokens})
            return
        if request.purpose == "compact":
            summary = summarize(request)
            yield ModelReply(text=summary, usage={"input_tokens": tokens, "output_tokens": len(summary) // 4})
            return
        text, calls, delay = self._decide(request)
        size = self.chunk if text == ESSAY * 3 else max(self.chunk, -(-len(text) // PIECES))
        for i in range(0, len(text), size):
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(text[i : i + size])
        yield ModelReply(
            text=text,
            tool_calls=calls,
            stop_reason=StopReason.TOOL_USE if calls else StopReason.END_TURN,
            usage={"input_tokens": tokens, "output_tokens": len(text) // 4},
        )
