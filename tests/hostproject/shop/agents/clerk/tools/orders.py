from agents_app.runtime import tool

ORDER = {
    "type": "object",
    "properties": {
        "item": {"type": "string", "minLength": 1, "maxLength": 200},
        "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
    },
    "required": ["item"],
    "additionalProperties": False,
}


@tool("create_order", "Record a purchase in the shop.", ORDER)
def create_order(input, ctx):
    """A ``def`` tool: its row commits with the step (exactly once) in the host's database."""
    from hostproject.shop.models import Purchase

    purchase = Purchase.objects.create(
        item=input["item"], quantity=input.get("quantity", 1), turn_id=ctx.turn_id, call_id=ctx.call_id
    )
    return {"purchase_id": purchase.pk}


@tool("flaky", "Writes a purchase, then fails: the row must roll back.", {"type": "object", "properties": {}})
def flaky(input, ctx):
    from hostproject.shop.models import Purchase

    Purchase.objects.create(item="never", quantity=1, turn_id=ctx.turn_id, call_id=ctx.call_id)
    raise RuntimeError("the till jammed")


@tool(
    "issue_refund",
    "Refund once staff approve.",
    {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["order_id", "amount"],
    },
)
async def issue_refund(input, ctx):
    approved = await ctx.request_input(
        id="approve",
        prompt=f"Refund {input['amount']} on {input['order_id']}?",
        schema={"type": "boolean"},
        answerers={"policy": "staff"},
    )
    return {"refunded": approved is True}
