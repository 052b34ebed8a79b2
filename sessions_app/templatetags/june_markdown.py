"""``{{ text|markdown }}``: an assistant's text as safe HTML (sessions_app/markdown.py)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from sessions_app.markdown import to_html

register = template.Library()


@register.filter(name="markdown")
def markdown(text: str) -> SafeString:
    return mark_safe(to_html(text))  # noqa: S308 (escaped by markdown-it, cleaned by nh3)
