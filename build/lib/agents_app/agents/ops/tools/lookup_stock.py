import hashlib

from agents_app.runtime import tool


@tool(
    "lookup_stock",
    "Look up how many of an item are in stock.",
    {"type": "object", "properties": {"item": {"type": "string", "minLength": 1}}, "required": ["item"]},
)
async def lookup_stock(input, ctx):
    """Async and read-only (a stand-in for a warehouse API): safe to run again."""
    digest = hashlib.sha256(input["item"].lower().encode()).digest()
    return {"item": input["item"], "in_stock": digest[0] % 50}
