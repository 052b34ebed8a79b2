import asyncio

from agents_app.runtime import tool

#: the longest wait the tool takes (a longer one is an invalid input the model reads): a demo
#: tool holds its turn's slot while it runs, and a cancel interrupts it anyway
MAX_SECONDS = 120


@tool(
    "wait",
    f"Wait a number of seconds, at most {MAX_SECONDS} (to try cancel and replace by hand).",
    {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_SECONDS}},
        "required": ["seconds"],
    },
)
async def wait(input, ctx):
    """Async: a cancel of the turn interrupts the sleep (its result is ``{"cancelled": true}``)."""
    await asyncio.sleep(float(input["seconds"]))
    return {"waited": input["seconds"]}
