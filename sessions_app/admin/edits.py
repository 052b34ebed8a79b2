"""What a person changed when they answered a tool approval with an edit: the model's proposed
input (from the request, kept in the turn's ``input.requested`` event) beside the input they
approved (the ``Answer`` row), for the turn page's answers table."""

from __future__ import annotations

import json
from typing import Any

from sessions_app import models as m


def proposed_inputs(turn: m.Turn) -> dict[str, Any]:
    """input id -> the input the model proposed, for the turn's tool-approval requests."""
    found: dict[str, Any] = {}
    for data in turn.logged().filter(type="input.requested").values_list("data", flat=True)[:200]:
        request = (data or {}).get("request") if isinstance(data, dict) else None
        if isinstance(request, dict) and request.get("kind") == "tool_approval":
            found[str(request.get("id"))] = request.get("input")
    return found


def edit_note(answer: m.Answer, proposed: dict[str, Any]) -> str:
    """``before → after`` for an edit, the decision for another tool approval, "" otherwise."""
    value = answer.answer if isinstance(answer.answer, dict) else None
    if answer.input_id not in proposed or value is None:
        return ""
    decision = value.get("decision")
    if decision == "edit":
        before = json.dumps(proposed[answer.input_id], sort_keys=True)
        after = json.dumps(value.get("input"), sort_keys=True)
        return f"edited: {before} → {after}"
    return str(decision or "")
