"""Search in what was said: the text of user, trigger and assistant messages.

One module decides how text is matched, once per database vendor (``MATCHERS``):

- PostgreSQL: full-text search (``websearch_to_tsquery``: words, ``"a phrase"``, ``or``,
  ``-word``) over the message text, OR every wanted term as a case-insensitive substring, so
  that a short or partial token ("mug" in "mugs", an id fragment) is found too.
- SQLite (the embedded default) and anything else: every wanted term as a case-insensitive
  substring, no unwanted (``-word``) one.

A message's text is not a column: it is ``data->>'text'`` of the message's JSON (kept as text,
``models.TextJSONField``), read here with ``KeyTextTransform`` on both vendors. Nothing is
indexed for this (no migration): a person's search reads their own sessions' live messages, a
staff search reads every message, newest first, and stops at ``limit``. See docs/ui.md
"Search and export".

Highlighting is done here too, in Python, on the escaped text: ``highlight`` escapes every piece
of the message and wraps the matches in ``<mark>`` itself, never marking user text safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db import connection
from django.db.models import F, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString

from sessions_app import models as m
from sessions_app.site_errors import BadRequest

#: the longest query taken (a longer one is refused with a message, never cut silently)
MAX_QUERY_CHARS = 200
#: hits shown at most; a page says "more" when there were more
MAX_RESULTS = 50
#: characters of context each side of the first match in a snippet
SNIPPET_CONTEXT = 80
#: the roles whose text is searched (a tool's result and a compaction summary are not "said")
SEARCHED_ROLES = ("user", "trigger", "assistant")
#: the full-text configuration on PostgreSQL (stemming: "ordering" finds "order")
FTS_CONFIG = "english"

_TOKEN = re.compile(r'(-?)"([^"]*)"|(\S+)')


@dataclass(frozen=True)
class Terms:
    """A query split as websearch reads it: what must appear, what must not."""

    wanted: tuple[str, ...]
    unwanted: tuple[str, ...]


def parse_query(raw: Any) -> str:
    """The query, trimmed, or BadRequest (empty, too long, NUL): the one check every entry point
    applies before searching."""
    if not isinstance(raw, str):
        raise BadRequest("q must be a string")
    if len(raw) > MAX_QUERY_CHARS:  # as sent: the API document bounds what is sent
        raise BadRequest(f"the search is longer than {MAX_QUERY_CHARS} characters")
    query = " ".join(raw.split())
    if not query:
        raise BadRequest("q must not be empty")
    if "\x00" in query:
        raise BadRequest("q must not contain NUL")
    return query


def terms(query: str) -> Terms:
    """``word``, ``"a phrase"`` (one term), ``-word`` / ``-"a phrase"`` (unwanted); ``or`` is
    websearch's operator, not a word. Pure: the substring match and the highlight read it."""
    wanted: list[str] = []
    unwanted: list[str] = []
    for neg, phrase, word in _TOKEN.findall(query):
        if word:
            neg, text = ("-", word[1:]) if word.startswith("-") and len(word) > 1 else ("", word)
        else:
            text = phrase
        text = text.strip().strip('"')
        if not text or (not neg and text.lower() == "or"):
            continue
        (unwanted if neg else wanted).append(text)
    return Terms(tuple(dict.fromkeys(wanted)), tuple(dict.fromkeys(unwanted)))


# -- matching, per vendor -----------------------------------------------------------------------------


def _text() -> KeyTextTransform:
    return KeyTextTransform("text", "data")


def _substrings(found: Terms) -> Q:
    """Every wanted term in the text, no unwanted one (case-insensitive; LIKE's wildcards escaped)."""
    q = Q()
    for term in found.wanted:
        q &= Q(search_text__icontains=term)
    for term in found.unwanted:
        q &= ~Q(search_text__icontains=term)
    return q


def _plain(qs: QuerySet, query: str, found: Terms) -> QuerySet:
    if not found.wanted:
        return qs.none()
    return qs.annotate(search_text=_text()).filter(_substrings(found))


def _postgres(qs: QuerySet, query: str, found: Terms) -> QuerySet:
    if not found.wanted:
        return qs.none()
    vector = SearchVector(_text(), config=FTS_CONFIG)
    tsquery = SearchQuery(query, search_type="websearch", config=FTS_CONFIG)
    return qs.annotate(search_text=_text(), search_vector=vector).filter(Q(search_vector=tsquery) | _substrings(found))


#: how text is matched, chosen once per vendor
MATCHERS: dict[str, Callable[[QuerySet, str, Terms], QuerySet]] = {"postgresql": _postgres}


def matching(qs: QuerySet, query: str) -> QuerySet:
    """``qs`` (messages) narrowed to those whose text matches ``query`` (already ``parse_query``'d)."""
    return MATCHERS.get(connection.vendor, _plain)(qs, query, terms(query))


# -- the two searches ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    session: m.Session
    generation: int
    index: int
    role: str
    turn_id: str | None
    created_at: Any
    text: str

    @property
    def live(self) -> bool:
        return self.generation == self.session.generation


def _hits(qs: QuerySet, query: str, limit: int | None) -> tuple[list[Hit], bool]:
    limit = limit or MAX_RESULTS
    rows = list(
        matching(qs.filter(role__in=SEARCHED_ROLES), query)
        .select_related("session__owner")
        .order_by("-created_at", "-index")[: limit + 1]
    )
    hits = [
        Hit(
            session=r.session,
            generation=r.generation,
            index=r.index,
            role=r.role,
            turn_id=r.turn_id,
            created_at=r.created_at,
            text=str((r.data or {}).get("text") or ""),
        )
        for r in rows[:limit]
    ]
    return hits, len(rows) > limit


def owner_hits(*, user: Any, query: str, limit: int | None = None) -> tuple[list[Hit], bool]:
    """The user's own sessions' live generations only (an archived generation is not in a
    person's search: the archive page is where they read it), newest first; and whether more
    matched than ``limit``."""
    qs = m.Message.objects.filter(session__owner=user, generation=F("session__generation"))
    return _hits(qs, query, limit)


def staff_hits(*, query: str, limit: int | None = None) -> tuple[list[Hit], bool]:
    """Every session, live and archived generations alike, newest first (the admin's search;
    the caller checks staff)."""
    return _hits(m.Message.objects.all(), query, limit)


# -- snippets and highlight -----------------------------------------------------------------------------


def _pattern(text: str, found: Terms) -> re.Pattern[str] | None:
    """What to mark: each wanted term where it appears as typed; a term that does not (a stem
    match of the full-text search: "ordering" for "orders") marks the words that share its stem."""
    parts = []
    lowered = text.lower()
    for term in sorted(found.wanted, key=len, reverse=True):
        if term.lower() in lowered:
            parts.append(re.escape(term))
        elif len(term) > 3:
            parts.append(r"\b" + re.escape(term[: max(3, len(term) - 3)]) + r"\w*")
    return re.compile("|".join(parts), re.IGNORECASE) if parts else None


def snippet(text: str, query: str, context: int = SNIPPET_CONTEXT) -> tuple[str, re.Pattern[str] | None]:
    """The part of ``text`` around its first match (whitespace folded), and the pattern to mark."""
    text = " ".join(text.split())
    pattern = _pattern(text, terms(query))
    match = pattern.search(text) if pattern else None
    start = max(0, match.start() - context) if match else 0
    end = min(len(text), (match.end() if match else 0) + context)
    cut = text[start:end]
    return ("…" if start else "") + cut + ("…" if end < len(text) else ""), pattern


def highlight(text: str, query: str) -> SafeString:
    """A snippet of ``text`` as HTML: every piece escaped, the matches wrapped in ``<mark>``."""
    shown, pattern = snippet(text, query)
    if pattern is None:
        return conditional_escape(shown)
    out, at = SafeString(), 0
    for match in pattern.finditer(shown):
        if match.end() == match.start():
            continue
        out += conditional_escape(shown[at : match.start()]) + format_html("<mark>{}</mark>", match.group())
        at = match.end()
    return out + conditional_escape(shown[at:])
