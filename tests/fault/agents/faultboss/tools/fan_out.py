from agents_app.runtime import tool
from tests.fault import faultkit


@tool("fan_out", "Hand n items to faultagent children, in parallel.",
      {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
async def fan_out(input, ctx):
    faultkit.record("fanout", ctx.turn_id)
    results = await ctx.spawn_all([("faultagent", f"item{i}") for i in range(input["n"])])
    return [{"status": r["status"], "text": r["text"], "turn_id": r["turn_id"]} for r in results]
