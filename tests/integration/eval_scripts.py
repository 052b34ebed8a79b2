"""Scripted models for the evals' tests (``script:tests.integration.eval_scripts:NAME``),
importable by the workers too (they run from the repository's root)."""

from __future__ import annotations

from agents_app.runtime import ModelRequest, reply


def version_then_echo(request: ModelRequest):
    """Step 1 calls the agent's ``version`` tool; step 2 answers its result and the turn's
    instructions: what the version's folder (its tool module, its instructions.md) is."""
    results = [m for m in request.messages if str(m.role) == "tool"]
    if not results:
        return reply("", ("version", {}))
    return reply(f"{results[-1].result} | {request.system.strip()}")
