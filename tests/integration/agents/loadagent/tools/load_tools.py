import asyncio
import time

from django.db import connection

from agents_app.runtime import tool

SECONDS = {
    "type": "object",
    "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 60}},
    "required": ["seconds"],
}


@tool("nap", "Sleep a while without holding anything.", SECONDS)
async def nap(input, ctx):
    await asyncio.sleep(input["seconds"])
    return {"napped": input["seconds"]}


@tool("block", "Hold this tool's thread a while.", SECONDS)
def block(input, ctx):
    time.sleep(input["seconds"])
    return {"blocked": input["seconds"]}


@tool(
    "blockdb",
    "Hold this tool's thread a while, after a query on its connection (inside the step's "
    "transaction: on SQLite that holds the database's write lock).",
    SECONDS,
)
def blockdb(input, ctx):
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    time.sleep(input["seconds"])
    return {"blocked": input["seconds"]}


@tool("burn", "Hold the event loop a while (what a tool must not do).", SECONDS)
async def burn(input, ctx):
    until = time.monotonic() + input["seconds"]
    while time.monotonic() < until:
        pass
    return {"burned": input["seconds"]}


@tool("spin", "Compute a while on the event loop, a millisecond at a time, letting the others run between.", SECONDS)
async def spin(input, ctx):
    for _ in range(round(input["seconds"] * 1000)):
        piece = time.monotonic() + 0.001
        while time.monotonic() < piece:
            pass
        await asyncio.sleep(0)
    return {"spun": input["seconds"]}
