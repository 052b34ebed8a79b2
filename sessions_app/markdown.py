"""Assistant text as HTML for the archive and the admin (the chat renders it the same way in the
browser: static/june/chat/markdown.js, with markdown-it and DOMPurify under this allow-list;
tests/browser/test_markdown.py compares the two on one corpus). CommonMark with tables; raw HTML in the text is not passed
through (markdown-it's ``html=False``: it is escaped, shown as text), and what comes out is
cleaned again by nh3 (Ammonia) with an allow-list of tags, links limited to http, https and
mailto, each with ``rel="noopener noreferrer"``."""

from __future__ import annotations

import functools
import re
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

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
#: what one text's parse may cost, in calls of markdown-it's rules: one per block (and per line a
#: paragraph, list or quote reads on) and one per inline position a mark could start at. Past it
#: the text is shown as written (``plain_html``): markdown-it's work per call is about constant,
#: so this bounds the time of a render whatever the text (docs/ui.md, "Formatted replies").
BUDGET = 10_000
PARAGRAPHS = re.compile(r"\n[ \t]*\n")


class OverBudget(Exception):
    pass


def _meter(state: Any, *_: Any) -> bool:
    """A rule that matches nothing and counts its calls (it runs first, on every chain)."""
    state.env["june_cost"] = cost = state.env.get("june_cost", 0) + 1
    if cost > BUDGET:
        raise OverBudget
    return False


@functools.cache
def _parser() -> MarkdownIt:
    parser = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
    parser.block.ruler.before("table", "june_meter", _meter, {"alt": ["paragraph", "reference", "blockquote", "list"]})
    parser.inline.ruler.before("text", "june_meter", _meter)
    return parser


def plain_html(text: str) -> str:
    """``text`` as written: its paragraphs (split at blank lines), line breaks kept, escaped."""
    paragraphs = (p.strip(" \t\n") for p in PARAGRAPHS.split(re.sub(r"\r\n?", "\n", text)))
    return "".join("<p>" + escapeHtml(p).replace("\n", "<br>\n") + "</p>\n" for p in paragraphs if p)


def markdown_html(text: str) -> str:
    """markdown-it's HTML for ``text``, before it is cleaned (what the browser's markdown-it gives);
    the text as written when its parse would cost more than ``BUDGET``."""
    text = str(text or "")[:MAX_CHARS]
    try:
        return _parser().render(text, {})
    except OverBudget:
        return plain_html(text)


def to_html(text: str) -> str:
    """Safe HTML for ``text`` (Markdown); never raises for any string."""
    html = markdown_html(text)
    clean = nh3.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        url_relative="deny",  # a relative, empty or scheme-less ("//host") link loses its target too
        link_rel="noopener noreferrer",
        filter_style_properties={"text-align"},
    )
    # a code block's long line scrolls: the keyboard must reach it (axe: scrollable-region-focusable).
    # After the clean, "<pre>" is only ever a tag nh3 wrote (text's "<" is escaped), never with attributes.
    return clean.replace("<pre>", '<pre tabindex="0">')
