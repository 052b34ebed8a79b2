import asyncio

from agents_app.runtime import tool


@tool(
    "wait",
    "Wait a number of seconds (to try cancel and replace by hand).",
    {"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 600}},
     "required": ["seconds"]},
)
async def wait(input, ctx):
    await asyncio.sleep(float(input["seconds"]))
    return {"waited": input["seconds"]}
