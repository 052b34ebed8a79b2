from agents_app.runtime import tool


@tool(
    "ask_clearance",
    "Ask an operator whether findings on a sensitive topic may be released.",
    {"type": "object", "properties": {"topic": {"type": "string", "minLength": 1}}, "required": ["topic"]},
)
async def ask_clearance(input, ctx):
    """Parks this researcher's turn (and so its parent's tool call) until an operator answers in the
    admin inbox or the chat's card."""
    cleared = await ctx.request_input(
        id="clearance",
        prompt=f"Release the findings on {input['topic']!r}?",
        schema={"type": "boolean"},
        answerers={"policy": "operator", "scope": {"topic": input["topic"]}},
    )
    return {"topic": input["topic"], "cleared": bool(cleared)}
