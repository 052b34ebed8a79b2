import asyncio

from agents_app.runtime import require_handle, tool
from tests.fault import faultkit

SCHEMA = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}


@tool("fault_write", "Write an order row (sync: exactly-once with the step).", SCHEMA)
def fault_write(input, ctx):
    require_handle(ctx)
    from agents_app.models import Order

    faultkit.point("write:before")
    faultkit.record("write", ctx.turn_id)
    order = Order.objects.create(item=input["item"], quantity=1, turn_id=ctx.turn_id, call_id=ctx.call_id)
    faultkit.point("write:after")
    return {"order_id": order.pk}


@tool("fault_ping", "Ping a remote service (async: at-least-once).", SCHEMA)
async def fault_ping(input, ctx):
    await faultkit.apoint("ping:before")
    for _ in range(5):  # some work to be killed in the middle of
        await asyncio.sleep(faultkit.delay())
    faultkit.record("ping", ctx.turn_id)
    await faultkit.apoint("ping:after")
    return {"pinged": input["item"], "key": ctx.idempotency_key}


@tool("fault_noop", "Do nothing (sync): the cheapest checkpointed step.", {"type": "object", "properties": {}})
def fault_noop(input, ctx):
    return {"ok": True}


@tool("fault_charge", "Charge a card (async; never repeated: on_interrupt='report').", SCHEMA, on_interrupt="report")
async def fault_charge(input, ctx):
    faultkit.record("charge", ctx.turn_id)
    await faultkit.apoint("charge:during")
    return {"charged": input["item"]}


@tool(
    "fault_approved_write",
    "Write an order row once a person approves (sync, declared approval).",
    SCHEMA,
    approval={"prompt": "Write this order?"},
)
def fault_approved_write(input, ctx):
    from agents_app.models import Order

    faultkit.point("approved:before")
    faultkit.record("approved", ctx.turn_id)
    order = Order.objects.create(item=input["item"], quantity=1, turn_id=ctx.turn_id, call_id=ctx.call_id)
    faultkit.point("approved:after")
    return {"order_id": order.pk}
