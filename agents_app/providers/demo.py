"""The demo model: offline and deterministic, so the embedded default works with no API key.

Its rules (also in ``agents_app/agents/ops/README.md``), read off the last user message:

- ``order <item>``               → calls ``create_order`` (sync tool: writes an Order row)
- ``stock <item>``               → calls ``lookup_stock`` (async, read-only)
- ``flaky``                      → calls ``flaky`` (raises: shows an error result)
- ``refund order <id> <amount>`` → calls ``issue_refund`` (parks for an operator's approval)
- ``wait <seconds>``             → calls ``wait`` (async, sleeps; try cancel/replace on it)
- ``essay``                      → streams a long answer slowly (try cancel mid-stream)
- ``summary``                    → a daily summary (what the ops schedule seeds)
- ``research <a> [and <b> …]``   → calls ``research``: one ``researcher`` child turn per topic
  (subagents, run in parallel); a researcher, given its topic as task data, calls
  ``search_notes`` and answers with the notes (a topic with "secret" in it calls
  ``ask_clearance`` instead: an operator approves it, as a refund)
- anything else                  → answers in prose, echoing the message

After tool results it answers in prose, describing each result. Text streams in small deltas.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, AsyncIterator

from agents_app.runtime.messages import Message, Role, ToolCall
from agents_app.runtime.model import ModelChunk, ModelReply, ModelRequest, StopReason, TextDelta

ESSAY = (
    "Durable execution means a turn is a process, not a request. Every step commits as it "
    "finishes: the model's reply with the assistant message, each tool's result with its tool "
    "message. If a worker dies, another one reads the journal and carries on where the database "
    "says the turn stopped, without running a finished step again. A person can answer an "
    "approval days later; a cancel is a row, so it survives a crash too. "
)


TASK = re.compile(r"<task>\n(.*)\n</task>", re.S)


def _rules(text: str) -> tuple[str, dict[str, Any]] | None:
    lowered = text.lower()
    if task := TASK.search(text):  # a child turn's task data (subagents): research it
        goal = task.group(1).strip()[:200]
        if "secret" in goal.lower():
            return "ask_clearance", {"topic": goal}
        return "search_notes", {"query": goal}
    if m := re.match(r"\s*research\s+(.+)", text, re.IGNORECASE | re.S):
        topics = [t.strip()[:200] for t in re.split(r"\s+and\s+|,", m.group(1)) if t.strip()]
        return "research", {"topics": topics[:8]}
    if m := re.search(r"refund order\s+(\S+)\s+\$?(\d+(?:\.\d+)?)", lowered):
        return "issue_refund", {"order_id": m.group(1), "amount": float(m.group(2))}
    if m := re.search(r"\border\s+(.+)", text, re.IGNORECASE):
        return "create_order", {"item": m.group(1).strip()[:200]}
    if m := re.search(r"\bstock\s+(.+)", text, re.IGNORECASE):
        return "lookup_stock", {"item": m.group(1).strip()[:200]}
    if "flaky" in lowered:
        return "flaky", {}
    if m := re.search(r"\bwait\s+(\d+(?:\.\d+)?)", lowered):
        return "wait", {"seconds": float(m.group(1))}
    return None


def _describe(result: Any) -> str:
    return json.dumps(result, sort_keys=True) if not isinstance(result, str) else result


class DemoModel:
    def __init__(self, *, delay: float = 0.01, chunk: int = 6, essay_delay: float = 0.15) -> None:
        self.delay = delay
        self.chunk = chunk
        self.essay_delay = essay_delay

    def _decide(self, request: ModelRequest) -> tuple[str, tuple[ToolCall, ...], float]:
        transcript = request.messages
        last = transcript[-1] if transcript else Message(Role.USER)
        index = len(transcript)
        available = {t.name for t in request.tools}
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
        text = last.text
        if "essay" in text.lower():
            return ESSAY * 3, (), self.essay_delay
        if "summary" in text.lower():
            return "Daily summary: all systems nominal; no open incidents.", (), self.delay
        rule = _rules(text)
        if rule and rule[0] in available:
            name, args = rule
            return f"Calling {name}.", (ToolCall(id=f"call_{index}_0", name=name, input=args),), self.delay
        return f"You said: {text}", (), self.delay

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        text, calls, delay = self._decide(request)
        for i in range(0, len(text), self.chunk):
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(text[i : i + self.chunk])
        yield ModelReply(
            text=text,
            tool_calls=calls,
            stop_reason=StopReason.TOOL_USE if calls else StopReason.END_TURN,
            usage={"input_tokens": sum(len(m.text) for m in request.messages) // 4, "output_tokens": len(text) // 4},
        )
