"""Template tags of the admin index (templates/admin/index.html): the operator console's summary."""

from __future__ import annotations

from typing import Any

from django import template

from agents_app.runtime import short_turn_id
from sessions_app.admin.inbox import waiting_count

register = template.Library()


@register.simple_tag(takes_context=True)
def june_console_summary(context: Any) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_active or not user.is_staff:
        return {"waiting": 0}
    return {"waiting": waiting_count(user)}


@register.filter
def thousands(n: Any) -> str:
    """``12,345``: a count with its thousands separated (whatever the site's locale settings)."""
    try:
        return f"{int(n):,}"
    except (TypeError, ValueError):
        return "" if n is None else str(n)


@register.filter
def short_id(turn_id: Any) -> str:
    """``short_turn_id``: a turn's id in short, by its random end."""
    return short_turn_id(str(turn_id))
