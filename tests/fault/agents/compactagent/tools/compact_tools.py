from agents_app.runtime import tool


@tool("compact_noop", "Do nothing (sync).", {"type": "object", "properties": {}})
def compact_noop(input, ctx):
    return {"ok": True}
