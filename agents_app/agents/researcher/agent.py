"""The demo ``researcher`` agent: the child the ``ops`` agent's ``research`` tool spawns
(docs/subagents.md)."""

from __future__ import annotations

from agents_app.agents.operators import OPERATORS_GROUP, is_operator  # noqa: F401 (the group: tests, docs)

# provider: None = anthropic when ANTHROPIC_API_KEY is set, else the offline demo model
model = None
model_config = {"model": "claude-sonnet-4-5", "max_tokens": 1024}


# a subagent only: the chat's home page does not offer people a session of it
listed = False


def authorize_answer(*, policy, scope, by, principal):
    """A clearance (``ask_clearance``) is granted by active staff members of the operators
    group (``agents_app/agents/operators.py``)."""
    return policy == "operator" and principal is not None and is_operator(principal)
