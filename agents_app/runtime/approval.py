"""Declared approval of a tool call: a tool (a Python tool's ``@tool(..., approval={...})``, or an
MCP server's entry) that needs a person's yes before it runs.

Before such a call runs, the turn parks on a request of kind ``tool_approval`` showing the tool,
its input and who may answer; the answer is one of

- ``{"decision": "approve"}``: the call runs with the model's input;
- ``{"decision": "edit", "input": {...}}``: it runs with the person's input instead (checked
  against the tool's own schema when answered: a 422, nothing applied, otherwise);
- ``{"decision": "reject", "message": "..."}``: it never runs; the model reads the message.

The answer is kept with the turn's answers (the same machinery as ``ctx.request_input``: policies,
the inbox, the API, the audit of who answered), so a replay after a crash does not ask again and
runs the approved input once (a ``def`` tool exactly once, an ``async`` one at least once as
always); a rejected call never runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ToolDeclarationError

KEYS = {"answerers", "prompt"}
DECISIONS = ("approve", "edit", "reject")
MAX_MESSAGE = 2000


def check_declaration(tool: str, approval: Any) -> dict[str, Any] | None:
    """``approval`` as declared: None (no approval), True (the defaults), or a dict of
    ``answerers`` (as ``request_input``'s; default: the turn's speaker) and ``prompt``."""
    if approval is None or approval is False:
        return None
    if approval is True:
        return {}
    if not isinstance(approval, dict) or set(approval) - KEYS:
        raise ToolDeclarationError(f"tool {tool!r}: approval must be True or a dict of {sorted(KEYS)}")
    answerers = approval.get("answerers")
    if answerers is not None and not (
        isinstance(answerers, dict) and (set(answerers) in ({"user"}, {"policy"}, {"policy", "scope"}))
    ):
        raise ToolDeclarationError(
            f"tool {tool!r}: approval answerers must be {{'user': id}} or {{'policy': name, 'scope': ...}}"
        )
    if "prompt" in approval and not isinstance(approval["prompt"], str):
        raise ToolDeclarationError(f"tool {tool!r}: approval prompt must be a string")
    return dict(approval)


def input_id(call_id: str) -> str:
    return f"approve:{call_id}"


def answer_schema(tool_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "decision": {"enum": list(DECISIONS)},
            "input": tool_schema,
            "message": {"type": "string", "maxLength": MAX_MESSAGE},
        },
        "required": ["decision"],
        "additionalProperties": False,
        "if": {"properties": {"decision": {"const": "edit"}}},
        "then": {"required": ["decision", "input"]},
    }


@dataclass(frozen=True, slots=True)
class Gate:
    """What the loop does with a call that needs approval: park on ``ask``, or run with
    ``input``, or record ``rejected`` (the model's error) and never run."""

    ask: dict[str, Any] | None = None
    input: dict[str, Any] | None = None
    rejected: str | None = None


def gate(
    declared: dict[str, Any],
    tool_name: str,
    tool_schema: dict[str, Any],
    call_id: str,
    call_input: dict[str, Any],
    answers: dict[str, Any],
    default_answerers: Any,
) -> Gate:
    key = input_id(call_id)
    if key not in answers:
        answerers = declared.get("answerers")
        return Gate(
            ask={
                "id": key,
                "kind": "tool_approval",
                "prompt": declared.get("prompt") or f"Run {tool_name}?",
                "tool": tool_name,
                "input": call_input,
                "schema": answer_schema(tool_schema),
                "answerers": answerers if answerers is not None else default_answerers(),
            }
        )
    answer = answers[key] if isinstance(answers[key], dict) else {}
    decision = answer.get("decision")
    if decision == "approve":
        return Gate(input=call_input)
    if decision == "edit" and isinstance(answer.get("input"), dict):
        return Gate(input=answer["input"])
    message = str(answer.get("message") or "no reason given")[:MAX_MESSAGE]
    return Gate(rejected=f"rejected by a person: {message}")
