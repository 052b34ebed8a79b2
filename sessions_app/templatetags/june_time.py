"""The template half of ``sessions_app.times``: ``{{ at|june_time }}`` (``"ms"``: with
milliseconds), ``june_time_text`` for an attribute, ``june_iso`` for ``data-june-title-at``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString

from sessions_app.times import NONE, time_html, time_text

register = template.Library()


@register.filter(name="june_time")
def june_time(at: Any, precision: str = "") -> SafeString | str:
    """``{{ at|june_time }}``; ``{{ at|june_time:"ms" }}`` with milliseconds."""
    if not isinstance(at, dt.datetime):
        return NONE if at in (None, "") else str(at)
    return time_html(at, ms=precision == "ms")


@register.filter(name="june_time_text")
def june_time_text(at: Any) -> str:
    """For an attribute (a ``title``): the text alone; pair it with ``data-june-title-at``."""
    return time_text(at) if isinstance(at, dt.datetime) else ""


@register.filter(name="june_iso")
def june_iso(at: Any) -> str:
    """The instant in UTC (``data-june-title-at``, ``datetime``)."""
    if not isinstance(at, dt.datetime):
        return ""
    return (at if timezone.is_aware(at) else timezone.make_aware(at)).astimezone(dt.UTC).isoformat()
