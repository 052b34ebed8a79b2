"""The demo ``researcher`` agent: the child the ``ops`` agent's ``research`` tool spawns
(docs/subagents.md)."""

from __future__ import annotations

# provider: None = anthropic when ANTHROPIC_API_KEY is set, else the offline demo model
model = None
model_config = {"model": "claude-sonnet-4-5", "max_tokens": 1024}

OPERATORS_GROUP = "operators"

# a subagent only: the chat's home page does not offer people a session of it
listed = False


def authorize_answer(*, policy, scope, by, principal):
    """A clearance (``ask_clearance``) is granted by active staff members of the operators group.
    An operator may answer a request they made themselves (the answer's audit row says who
    answered); docs/approvals.md shows the one line that refuses it (four eyes)."""
    if policy != "operator" or principal is None:
        return False
    # imported here: an agent folder loads without Django (unit tests run it on the engine's fakes)
    from django.contrib.auth import get_user_model

    user = (
        get_user_model()
        .objects.filter(pk=principal.get("user_id") if isinstance(principal, dict) else principal)
        .first()
    )
    return bool(user and user.is_active and user.is_staff and user.groups.filter(name=OPERATORS_GROUP).exists())
