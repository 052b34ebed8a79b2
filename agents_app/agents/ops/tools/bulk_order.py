from agents_app.runtime import require_handle, tool


@tool(
    "bulk_order",
    "Place a bulk order; a person approves it first, and may change it.",
    {
        "type": "object",
        "properties": {
            "item": {"type": "string", "minLength": 1, "maxLength": 200},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        "required": ["item", "quantity"],
        "additionalProperties": False,
    },
    # declared approval (docs/approvals.md): the turn's speaker approves, edits or rejects the call
    # before it runs; the chat card shows the input, editable
    approval={"prompt": "Place this bulk order?"},
)
def bulk_order(input, ctx):
    """Sync: the Order row commits in the step's transaction, once, with the approved input."""
    require_handle(ctx)
    from agents_app.models import Order

    order = Order.objects.create(
        item=input["item"], quantity=input["quantity"], turn_id=ctx.turn_id, call_id=ctx.call_id
    )
    return {"order_id": order.pk, "item": order.item, "quantity": order.quantity}
