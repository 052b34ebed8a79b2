from agents_app.runtime import tool


@tool(
    "research",
    "Delegate research to the researcher agent: one child turn per topic, run in parallel.",
    {
        "type": "object",
        "properties": {"topics": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}},
        "required": ["topics"],
    },
)
async def research(input, ctx):
    """Async: the turn parks while its researchers run (no worker waits) and this runs again,
    from the top, with their results (docs/subagents.md)."""
    topics = input["topics"]
    if len(topics) == 1:
        result = await ctx.spawn("researcher", topics[0])
        return {"topic": topics[0], "findings": result["text"]}
    results = await ctx.spawn_all([("researcher", topic) for topic in topics])
    return [
        {"topic": topic, "status": r["status"], "findings": r["text"], "error": r["error"]}
        for topic, r in zip(topics, results)
    ]
