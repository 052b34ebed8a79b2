import asyncio
import hashlib
import os

from agents_app.runtime import tool

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
    await asyncio.sleep(float(os.environ.get("JUNE_DEMO_DELAY", "0.01")) * 20)  # a visible lookup
    digest = hashlib.sha256(input["query"].lower().encode()).digest()
    return {"query": input["query"], "notes": [f"{input['query']} {FACTS[b % len(FACTS)]}" for b in digest[:2]]}
