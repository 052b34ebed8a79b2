import asyncio
import hashlib

from django.conf import settings

from agents_app.runtime import tool

#: the lookup takes 20 demo delays (JUNE_DEMO_DELAY, 0.01 s by default), never more than this
MAX_LOOKUP_SECONDS = 5.0

FACTS = [
    "is mostly handled by the night shift",
    "peaked last quarter",
    "depends on two suppliers",
    "has an open improvement ticket",
    "was reviewed in the last audit",
    "costs less than budgeted",
]


@tool(
    "search_notes",
    "Search the team's notes for a topic (read-only).",
    {"type": "object", "properties": {"query": {"type": "string", "minLength": 1}}, "required": ["query"]},
)
async def search_notes(input, ctx):
    """Async and read-only (a stand-in for a search API): safe to run again."""
    delay = (0.01 if settings.JUNE_DEMO_DELAY is None else settings.JUNE_DEMO_DELAY) * 20  # a visible lookup
    await asyncio.sleep(min(max(delay, 0.0), MAX_LOOKUP_SECONDS))
    digest = hashlib.sha256(input["query"].lower().encode()).digest()
    return {"query": input["query"], "notes": [f"{input['query']} {FACTS[b % len(FACTS)]}" for b in digest[:2]]}
