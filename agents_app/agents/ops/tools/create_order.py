from agents_app.runtime import require_handle, tool


@tool(
    "create_order",
    "Place an order for an item.",
    {
        "type": "object",
        "properties": {
            "item": {"type": "string", "minLength": 1, "maxLength": 200},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        "required": ["item"],
        "additionalProperties": False,
    },
)
def create_order(input, ctx):
    """Sync: the Order row commits in the step's transaction (exactly-once)."""
    require_handle(ctx)  # the in-memory backend has no transaction to join: fail the turn
    # imported here: an agent folder loads without Django (unit tests run it on the engine's fakes)
    from agents_app.models import Order

    order = Order.objects.create(
        item=input["item"], quantity=input.get("quantity", 1), turn_id=ctx.turn_id, call_id=ctx.call_id
    )
    return {"order_id": order.pk, "item": order.item, "quantity": order.quantity}
