"""Who the demo agents' ``operator`` grants go to: active staff members of the operators group
(docs/approvals.md). Django is imported when asked, so an agent folder loads without it (unit
tests run the agents on the engine's fakes)."""

from __future__ import annotations

from typing import Any

OPERATORS_GROUP = "operators"


def is_operator(principal: Any) -> bool:
    """``principal`` (a user id, or ``{"user_id": …}``) is an active staff member of the group.
    An operator may answer a request they made themselves (the answer's audit row says who
    answered); docs/approvals.md shows the one line that refuses it (four eyes)."""
    from django.contrib.auth import get_user_model

    user_id = principal.get("user_id") if isinstance(principal, dict) else principal
    user = get_user_model().objects.filter(pk=user_id).first()
    return bool(user and user.is_active and user.is_staff and user.groups.filter(name=OPERATORS_GROUP).exists())
