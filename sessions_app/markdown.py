"""Assistant text as HTML for the archive and the admin (the chat renders it the same way in the
browser: static/june/chat/markdown.js, with markdown-it and DOMPurify under this allow-list;
tests/browser/test_markdown.py compares the two on one corpus). CommonMark with tables; raw HTML in the text is not passed
through (markdown-it's ``html=False``: it is escaped, shown as text), and what comes out is
cleaned again by nh3 (Ammonia) with an allow-list of tags, links limited to http, https and
mailto, each with ``rel="noopener noreferrer"``."""

from __future__ import annotations

import functools

import nh3
from markdown_it import MarkdownIt

TAGS = {
    "p",
    "br",
    "strong",
    "em",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "del",
}
#: a table column's alignment comes as ``style="text-align:…"`` (nothing else of a style survives)
ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "ol": {"start"}, "th": {"style"}, "td": {"style"}}
MAX_CHARS = 200_000


@functools.cache
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def markdown_html(text: str) -> str:
    """markdown-it's HTML for ``text``, before it is cleaned (what the browser's markdown-it gives)."""
    return _parser().render(str(text or "")[:MAX_CHARS])


def to_html(text: str) -> str:
    """Safe HTML for ``text`` (Markdown); never raises for any string."""
    html = markdown_html(text)
    clean = nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
        filter_style_properties={"text-align"},
    )
    # a code block's long line scrolls: the keyboard must reach it (axe: scrollable-region-focusable).
    # After the clean, "<pre>" is only ever a tag nh3 wrote (text's "<" is escaped), never with attributes.
    return clean.replace("<pre>", '<pre tabindex="0">')
