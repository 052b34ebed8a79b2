"""LangGraph's side of bench/bench_peers.py: a prebuilt ReAct agent (model -> ``create_order``,
a tool that inserts a row in PostgreSQL -> model), served by ``langgraph dev`` (the in-memory
runtime: runs and checkpoints are held in the server's memory, not durably). Runs in
var/peers/langgraph's venv; ``ANTHROPIC_BASE_URL`` is the bench's Messages API peer and
``BENCH_ORDERS_URL`` the database of the orders table."""

from __future__ import annotations

import os
import threading

import psycopg
from langchain_anthropic import ChatAnthropic
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent

_local = threading.local()


def _conn() -> psycopg.Connection:
    """This thread's connection (tools run on the server's executor threads)."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["BENCH_ORDERS_URL"], autocommit=True)
    return conn


@tool
def create_order(item: str, quantity: int, config: RunnableConfig) -> str:
    """Create an order for an item."""
    key = str(config["configurable"]["thread_id"])
    _conn().execute("INSERT INTO bench_orders (key, item, quantity) VALUES (%s, %s, %s)", (key, item, quantity))
    return f"ordered {quantity} {item}"


model = ChatAnthropic(
    model="claude-sonnet-4-5",
    base_url=os.environ["ANTHROPIC_BASE_URL"],
    api_key="bench-key",
    max_tokens=1024,
    streaming=True,
)
graph = create_react_agent(model, [create_order])
