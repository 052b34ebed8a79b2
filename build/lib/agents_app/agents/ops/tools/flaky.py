from agents_app.runtime import tool


class WarehouseTimeout(Exception):
    pass


@tool("flaky", "A tool that always fails (to show error results).", {"type": "object", "properties": {}})
async def flaky(input, ctx):
    raise WarehouseTimeout("the warehouse API did not answer in time")
