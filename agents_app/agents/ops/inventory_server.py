"""The demo's MCP server (stdio, no network): a small inventory the ``ops`` agent reaches as
``inventory__count`` and ``inventory__reserve`` (agent.py's ``mcp``; docs/tools.md).

``python inventory_server.py DB``: the stock and the reservations live in the SQLite file ``DB``
(agent.py names one in the site's var directory), not in this process. The worker runs one such
process per worker process, and a call June retries after a worker's crash reaches a new process
(the old one died with its worker): ``reserve`` dedupes on the idempotency key June sends in the
request's ``_meta`` (``june/idempotency_key``) through that file, so the retry reserves nothing
again and answers what the first call answered. Every server process of the site shares the file
(one inventory; a reservation is one ``BEGIN IMMEDIATE`` transaction)."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("inventory", instructions="A small warehouse inventory.")
#: what a new inventory file holds
STOCK = {"tea": 40, "mugs": 12, "pears": 0, "coffee": 25}
SCHEMA = """
CREATE TABLE IF NOT EXISTS stock (item TEXT PRIMARY KEY, quantity INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reservation (key TEXT PRIMARY KEY, answer TEXT NOT NULL);
"""
_db: sqlite3.Connection | None = None
#: the SDK runs sync tools on threads: one transaction at a time on this process's connection
_lock = threading.Lock()


def open_inventory(path: str | Path) -> sqlite3.Connection:
    """The inventory file (created with ``STOCK`` when new); autocommit, transactions explicit."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    db.executemany("INSERT OR IGNORE INTO stock (item, quantity) VALUES (?, ?)", STOCK.items())
    return db


def _inventory() -> sqlite3.Connection:
    if _db is None:
        raise ToolError("the inventory server was started without its file")
    return _db


@server.tool()
def count(item: str) -> dict:
    """How many of an item the warehouse holds."""
    with _lock:
        row = _inventory().execute("SELECT quantity FROM stock WHERE item = ?", (item.lower(),)).fetchone()
    return {"item": item, "in_stock": row[0] if row else 0}


@server.tool()
def reserve(item: str, quantity: int, ctx: Context) -> dict:
    """Reserve some of an item (once per idempotency key)."""
    key = str((ctx.request_context.meta or {}).get("june/idempotency_key") or "")
    with _lock:
        return reserve_once(_inventory(), item, quantity, key)


def reserve_once(db: sqlite3.Connection, item: str, quantity: int, key: str) -> dict:
    """The reservation and its key's record in one transaction: a key seen before (by any server
    process, before any crash) answers what it answered then, with ``deduplicated``."""
    db.execute("BEGIN IMMEDIATE")
    try:
        done = db.execute("SELECT answer FROM reservation WHERE key = ?", (key,)).fetchone() if key else None
        if done is not None:
            return {**json.loads(done[0]), "deduplicated": True}
        row = db.execute("SELECT quantity FROM stock WHERE item = ?", (item.lower(),)).fetchone()
        have = row[0] if row else 0
        if quantity < 1 or quantity > have:
            raise ToolError(f"cannot reserve {quantity} {item}: {have} in stock")  # the model reads it
        db.execute("UPDATE stock SET quantity = ? WHERE item = ?", (have - quantity, item.lower()))
        answer = {"item": item, "reserved": quantity, "left": have - quantity}
        if key:
            db.execute("INSERT INTO reservation (key, answer) VALUES (?, ?)", (key, json.dumps(answer)))
        db.execute("COMMIT")
        return answer
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")


def main(argv: list[str]) -> None:
    global _db
    if len(argv) != 1:
        sys.exit("usage: inventory_server.py INVENTORY.sqlite3")
    _db = open_inventory(argv[0])
    server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
