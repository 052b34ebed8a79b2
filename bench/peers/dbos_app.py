"""DBOS Transact's side of bench/bench_peers.py: FastAPI under uvicorn, and a durable workflow
per turn (model step -> ``create_order`` step, a row in PostgreSQL -> model step), each step's
result checkpointed in DBOS's system database on PostgreSQL. ``POST /turns/<key>`` starts the
workflow (its id is the key) and answers 202. Runs in var/peers/dbos's venv;
``ANTHROPIC_BASE_URL`` is the bench's Messages API peer, ``BENCH_DBOS_URL`` the system database
and ``BENCH_ORDERS_URL`` the database of the orders table."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import anthropic
from dbos import DBOS, SetWorkflowID
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

DBOS(config={"name": "bench-dbos", "system_database_url": os.environ["BENCH_DBOS_URL"]})
client = anthropic.AsyncAnthropic(base_url=os.environ["ANTHROPIC_BASE_URL"], api_key="bench-key")
orders = AsyncConnectionPool(os.environ["BENCH_ORDERS_URL"], min_size=1, max_size=10, open=False)
TOOL = {
    "name": "create_order",
    "description": "Create an order for an item.",
    "input_schema": {
        "type": "object",
        "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
        "required": ["item", "quantity"],
    },
}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    DBOS.launch()
    await orders.open()
    yield
    await orders.close()
    DBOS.destroy()


app = FastAPI(lifespan=lifespan)


@DBOS.step()
async def call_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    async with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=[TOOL]
    ) as stream:
        message = await stream.get_final_message()
    return message.model_dump(mode="json", exclude_none=True)


@DBOS.step()
async def create_order(key: str, item: str, quantity: int) -> str:
    async with orders.connection() as conn:
        await conn.execute("INSERT INTO bench_orders (key, item, quantity) VALUES (%s, %s, %s)", (key, item, quantity))
    return f"ordered {quantity} {item}"


@DBOS.workflow()
async def turn(key: str, text: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    first = await call_model(messages)
    use = next(b for b in first["content"] if b["type"] == "tool_use")
    result = await create_order(key, **use["input"])
    messages += [
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": result}]},
    ]
    second = await call_model(messages)
    return "".join(b.get("text", "") for b in second["content"])


@app.post("/turns/{key}", status_code=202)
async def start(key: str, body: dict[str, Any]) -> dict[str, str]:
    with SetWorkflowID(key):
        handle = await DBOS.start_workflow_async(turn, key, body["text"])
    return {"workflow_id": handle.workflow_id}


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
