from agents_app.runtime import tool
from tests.fault import faultkit


@tool(
    "fan_out",
    "Hand n items to faultagent children, in parallel.",
    {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "mode": {"type": "string"}, "child": {"type": "string"}},
        "required": ["n"],
    },
)
async def fan_out(input, ctx):
    faultkit.record("fanout", ctx.turn_id)
    child = input.get("child", "item")
    texts = [f"{child}{i}" if child == "item" else child for i in range(input["n"])]
    if input.get("mode") == "seq":
        results = [(await ctx.spawn_all([("faultagent", text)]))[0] for text in texts]
    else:
        results = await ctx.spawn_all([("faultagent", text) for text in texts])
    return [{"status": r["status"], "text": r["text"], "turn_id": r["turn_id"]} for r in results]
