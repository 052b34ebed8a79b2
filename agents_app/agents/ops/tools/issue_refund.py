from agents_app.runtime import tool


@tool(
    "issue_refund",
    "Refund an order once an operator approves it.",
    {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "minLength": 1},
            "amount": {"type": "number", "exclusiveMinimum": 0},
        },
        "required": ["order_id", "amount"],
    },
    # once approved, the refund's write is short and its outcome must be known: a cancel then
    # waits for it (and the model reads what happened) instead of leaving it half-known
    on_cancel="finish",
)
async def issue_refund(input, ctx):
    approved = await ctx.request_input(
        id="approve-refund",  # stable within the turn: it keys the answer
        prompt=f"Approve a ${input['amount']:.2f} refund on order {input['order_id']}?",
        schema={"type": "boolean"},
        # four eyes: an operator may not approve a refund they asked for (``authorize_answer``)
        answerers={"policy": "operator", "scope": {"kind": "refunds", "requested_by": _requester(ctx)}},
    )
    if approved is not True:
        return {"refunded": False}
    # the side effect goes after the answer; the idempotency key dedupes a retried call
    # imported here: an agent folder loads without Django (unit tests run it on the engine's fakes)
    from asgiref.sync import sync_to_async

    from agents_app.models import Refund

    refund, _ = await sync_to_async(Refund.objects.get_or_create)(
        idempotency_key=ctx.idempotency_key,
        defaults={"order_ref": input["order_id"], "amount": input["amount"]},
    )
    return {"refunded": True, "refund_id": refund.pk, "amount": float(refund.amount)}


def _requester(ctx):
    """The site user who asked (an attested speaker: the chat, the API), or None (a webhook's
    users are the channel's own names, not the site's)."""
    user = ctx.user or {}
    return str(user["id"]) if user.get("attested") and user.get("id") is not None else None
