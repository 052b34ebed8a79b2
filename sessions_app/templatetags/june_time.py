"""The template half of ``sessions_app.times``: ``{{ at|june_time }}`` (``"ms"``: with
milliseconds), ``june_time_text`` for an attribute, ``june_iso`` for ``data-june-title-at``,
``june_ago`` for how long ago ("just now" under a minute, where ``timesince`` said "0 minutes")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

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


@register.filter(name="june_ago")
def june_ago(at: Any) -> str:
    """``"3 minutes ago"``; ``"just now"`` under a minute (``timesince`` alone read "0 minutes ago")."""
    if not isinstance(at, dt.datetime):
        return ""
    if (timezone.now() - at).total_seconds() < 60:
        return "just now"
    return f"{timesince(at)} ago"
