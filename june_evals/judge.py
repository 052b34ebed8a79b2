"""The LLM judge: a case's answer put to a model through June's own provider (the evaluated
agent's, ``agents_app.providers.model_for``), with the dataset's prompt; its reply starts with
PASS or FAIL, and the rest is the reason."""

from __future__ import annotations

import asyncio
from typing import Any

from agents_app.providers import model_for
from agents_app.runtime import Message, ModelReply, ModelRequest, Role
from june_evals.scorers import Score
from sessions_app import wiring

SYSTEM = (
    "You judge an assistant's answer against the criteria below. Reply with PASS or FAIL as your "
    "first word, then one sentence of reason.\n\nCriteria:\n"
)


def question(prompt: str, outcome: dict[str, Any]) -> ModelRequest:
    lines = [f"Input:\n{outcome.get('input', '')}", f"Answer:\n{outcome.get('text', '')}"]
    reference = outcome.get("reference")
    if reference:
        lines.append(f"Reference answer:\n{reference}")
    return ModelRequest(system=SYSTEM + prompt, messages=(Message(Role.USER, text="\n\n".join(lines)),), tools=())


async def _ask(model: Any, request: ModelRequest) -> str:
    reply = ""
    async for chunk in model.stream(request):
        if isinstance(chunk, ModelReply):
            reply = chunk.text
    return reply


def judge_for(agent: str) -> Any:
    """A judge for ``scorers.score`` that asks ``agent``'s model."""
    model = model_for(wiring.agent(agent))

    def judge(prompt: str, outcome: dict[str, Any]) -> Score:
        try:
            verdict = asyncio.run(_ask(model, question(prompt, outcome))).strip()
        except Exception as exc:  # a judge that fails fails its case, readably
            return Score("judge", False, f"the judge failed: {type(exc).__name__}: {exc}")
        return Score("judge", verdict.upper().startswith("PASS"), verdict[:500])

    return judge
